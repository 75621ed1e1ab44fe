// Package manifest decodes Kubernetes manifests as kubectl apply reads
// them, but strictly: every document of a multi-document YAML stream, into
// the typed objects of client-go's scheme (all built-in kinds, including
// resource.k8s.io and scheduling.k8s.io), with unknown and duplicate fields
// as errors. Tests of the shipped YAML, tests that apply it to an API server
// and tools that read it use this one decoder, so that a manifest they
// accept is one the API server accepts as written.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// strict decodes without conversion: objects keep the version they are
// written in.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Decode decodes every document of a YAML stream, in order. Documents with
// nothing but comments and blank lines (such as those Helm renders from an
// empty template) are skipped. Each object carries its apiVersion and kind.
// The error names the document (counted from 1) that did not decode.
func Decode(data []byte) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objects []runtime.Object
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if empty(doc) {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
		objects = append(objects, obj)
	}
}

// DecodeFile decodes the documents of a file, as Decode does; the error
// names the file.
func DecodeFile(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objects, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objects, nil
}

// KustomizationResources returns the files that the kustomization.yaml of a
// directory lists as resources, as paths below the directory, in its order.
// The kustomization must be a plain one, as those under config/ are: a
// kustomize.config.k8s.io/v1beta1 Kustomization with resources and nothing
// else (no patches, no generators), so that its files are exactly what
// `kubectl apply -k` applies.
func KustomizationResources(dir string) ([]string, error) {
	path := filepath.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s: %s %s is not a kustomize.config.k8s.io/v1beta1 Kustomization", path, k.APIVersion, k.Kind)
	}
	files := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		files[i] = filepath.Join(dir, r)
	}
	return files, nil
}

// OfType returns the objects of type T (such as *resourceapi.DeviceClass),
// in order.
func OfType[T runtime.Object](objects []runtime.Object) []T {
	var out []T
	for _, obj := range objects {
		if typed, ok := obj.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

// empty says whether a document has nothing but comments and blank lines.
func empty(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		if l := bytes.TrimSpace(line); len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}
