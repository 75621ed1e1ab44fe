// Package e2e drives kwok clusters built from locally compiled control-plane
// binaries, with drasched and the GPU driver running as processes.
//
// The tests arrive with the demo and benchmark issue.
package e2e
