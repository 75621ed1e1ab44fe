package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	info := Get()
	if info.Version == "" || info.GoVersion == "" || info.Platform == "" {
		t.Fatalf("incomplete version info: %+v", info)
	}
	// Test binaries carry no dependency information, so the Kubernetes
	// version is "unknown" here; TestKubernetesVersionFrom covers the lookup.
	if info.Kubernetes == "" {
		t.Error("empty Kubernetes version")
	}
	if s := info.String(); !strings.Contains(s, info.Version) || !strings.Contains(s, info.Kubernetes) {
		t.Errorf("String() = %q lacks the version or the Kubernetes version", s)
	}
}

func TestKubernetesVersionFrom(t *testing.T) {
	mod := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for name, tc := range map[string]struct {
		deps []*debug.Module
		want string
	}{
		"kubernetes module wins": {
			deps: []*debug.Module{mod("k8s.io/api", "v0.0.0", mod("k8s.io/api", "v0.37.1", nil)), mod("k8s.io/kubernetes", "v1.37.1", nil)},
			want: "v1.37.1",
		},
		"staging replace maps back": {
			deps: []*debug.Module{mod("k8s.io/api", "v0.0.0", mod("k8s.io/api", "v0.37.1", nil))},
			want: "v1.37.1",
		},
		"plain staging version": {
			deps: []*debug.Module{mod("k8s.io/api", "v0.36.4", nil)},
			want: "v1.36.4",
		},
		"nothing linked": {
			deps: []*debug.Module{mod("example.com/x", "v1.0.0", nil)},
			want: "unknown",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := kubernetesVersionFrom(tc.deps); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
