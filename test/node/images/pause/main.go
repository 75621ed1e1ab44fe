// Command pause is the pod sandbox of the real-node tests
// (hack/build-node.sh builds its image): it holds the pod's namespaces,
// reaps the zombies of a shared process namespace, and exits when the
// runtime stops it. It does what Kubernetes' pause does, in Go, so that
// the image builds from this repository without a C toolchain or a
// registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Reap every child that has exited; one SIGCHLD may stand for several.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
