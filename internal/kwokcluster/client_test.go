package kwokcluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNewClient(t *testing.T) {
	if _, err := NewClient("", "test", 0, 0); err == nil {
		t.Error("no kubeconfig: want an error")
	}
	dir := t.TempDir()
	if _, err := NewClient(filepath.Join(dir, "missing"), "test", 0, 0); err == nil {
		t.Error("missing kubeconfig file: want an error")
	}
	path := filepath.Join(dir, "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewClient(path, "test", 100, 200); err != nil {
		t.Errorf("valid kubeconfig: %v", err)
	}
}
