package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecode(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml      string
		wantKinds []schema.GroupVersionKind
		wantErr   string
	}{
		"documents in order, comments and empty documents skipped": {
			yaml: `# A file comment.
---
apiVersion: v1
kind: Namespace
metadata:
  name: a
---
# Only a comment, as Helm renders an empty template.
---

---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu
`,
			wantKinds: []schema.GroupVersionKind{
				{Version: "v1", Kind: "Namespace"},
				{Group: "resource.k8s.io", Version: "v1", Kind: "DeviceClass"},
			},
		},
		"nothing": {yaml: "# nothing\n"},
		"unknown field": {
			yaml:    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\nspec:\n  bogus: true\n",
			wantErr: `document 2: strict decoding error: unknown field "spec.bogus"`,
		},
		"duplicate field": {
			yaml:    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n",
			wantErr: `document 1: strict decoding error: yaml: unmarshal errors:`,
		},
		"unknown kind": {
			yaml:    "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\n",
			wantErr: `document 1: no kind "Widget" is registered`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			objects, err := Decode([]byte(tc.yaml))
			if checkError(t, err, tc.wantErr) {
				return
			}
			var kinds []schema.GroupVersionKind
			for _, obj := range objects {
				kinds = append(kinds, obj.GetObjectKind().GroupVersionKind())
			}
			if diff := cmp.Diff(tc.wantKinds, kinds); diff != "" {
				t.Errorf("kinds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containerz: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := DecodeFile(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+": document 1: ") {
		t.Errorf("error %v, want one naming %s and the document", err, path)
	}
	if _, err := DecodeFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("no error for a missing file")
	}
}

func TestOfType(t *testing.T) {
	objects, err := Decode([]byte(`apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: a
---
apiVersion: v1
kind: Namespace
metadata:
  name: ns
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: b
`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, class := range OfType[*resourceapi.DeviceClass](objects) {
		names = append(names, class.Name)
	}
	if diff := cmp.Diff([]string{"a", "b"}, names); diff != "" {
		t.Errorf("DeviceClasses (-want +got):\n%s", diff)
	}
	if pods := OfType[*corev1.Pod](objects); len(pods) != 0 {
		t.Errorf("%d pods, want none", len(pods))
	}
}

func TestKustomizationResources(t *testing.T) {
	for name, tc := range map[string]struct {
		kustomization string
		want          []string
		wantErr       string
	}{
		"plain": {
			kustomization: "# kubectl apply -k .\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- b.yaml\n- a.yaml\n",
			want:          []string{"b.yaml", "a.yaml"},
		},
		"patches": {
			kustomization: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../base\npatches:\n- path: p.yaml\n",
			wantErr:       `unknown field "patches"`,
		},
		"not a kustomization": {
			kustomization: "apiVersion: v1\nkind: ConfigMap\n",
			wantErr:       "v1 ConfigMap is not a kustomize.config.k8s.io/v1beta1 Kustomization",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(tc.kustomization), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := KustomizationResources(dir)
			if checkError(t, err, tc.wantErr) {
				return
			}
			var want []string
			for _, f := range tc.want {
				want = append(want, filepath.Join(dir, f))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("resources (-want +got):\n%s", diff)
			}
		})
	}
}

// checkError fails the test unless err is the error it wants: none if want
// is empty, otherwise one containing want. It says whether there was one.
func checkError(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
	return err != nil
}
