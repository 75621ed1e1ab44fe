// Package version reports the version of drasched binaries and of the
// Kubernetes release they are built on.
//
// The drasched version is stamped at build time by the Makefile:
//
//	-ldflags "-X github.com/drasched/drasched/pkg/version.gitVersion=v0.1.0 ..."
//
// The Kubernetes version is read from the binary's module information, so it
// always names the k8s.io/kubernetes module the binary was really linked with.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set through -ldflags -X by the Makefile. Unstamped builds (go run, go test)
// keep these defaults.
var (
	gitVersion = "v0.0.0-dev"
	gitCommit  = "unknown"
	buildDate  = "unknown"
)

// Info describes one build.
type Info struct {
	// Version is drasched's own version.
	Version string `json:"version"`
	// GitCommit is the commit the binary was built from.
	GitCommit string `json:"gitCommit"`
	// BuildDate is when the binary was built (RFC 3339).
	BuildDate string `json:"buildDate"`
	// Kubernetes is the version of the k8s.io/kubernetes module (or, if the
	// binary does not link it, of k8s.io/api) this binary was built with.
	Kubernetes string `json:"kubernetes"`
	// GoVersion is the Go toolchain used for the build.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build information of the running binary.
func Get() Info {
	return Info{
		Version:    gitVersion,
		GitCommit:  gitCommit,
		BuildDate:  buildDate,
		Kubernetes: kubernetesVersion(),
		GoVersion:  runtime.Version(),
		Platform:   runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// String is the one-line form printed by --version.
func (i Info) String() string {
	return fmt.Sprintf("drasched %s (commit %s, built %s) on Kubernetes %s, %s %s",
		i.Version, i.GitCommit, i.BuildDate, i.Kubernetes, i.GoVersion, i.Platform)
}

// kubernetesVersion looks up the linked Kubernetes module version. Staging
// modules are replaced to v0.MINOR.PATCH, so k8s.io/api maps back to
// v1.MINOR.PATCH when k8s.io/kubernetes itself is not linked.
func kubernetesVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return kubernetesVersionFrom(bi.Deps)
}

func kubernetesVersionFrom(deps []*debug.Module) string {
	var api string
	for _, dep := range deps {
		mod := dep
		if dep.Replace != nil {
			mod = dep.Replace
		}
		switch dep.Path {
		case "k8s.io/kubernetes":
			return mod.Version
		case "k8s.io/api":
			api = mod.Version
		}
	}
	if len(api) > 3 && api[:3] == "v0." {
		return "v1." + api[3:]
	}
	if api != "" {
		return api
	}
	return "unknown"
}
