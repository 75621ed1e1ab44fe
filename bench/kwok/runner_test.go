package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadDeviceClasses(t *testing.T) {
	classes, err := readDeviceClasses(repoRoot + "/config/gpu-driver/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range classes {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{gpuClass, migClass}, names); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	if _, err := readDeviceClasses(repoRoot + "/config/examples/one-gpu.yaml"); err == nil || !strings.Contains(err.Error(), "not a DeviceClass") {
		t.Errorf("a file with other objects: got error %v", err)
	}
}
