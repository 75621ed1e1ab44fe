//go:build !kube1.35

package minortest

// EnableDRAFeatures does nothing: the DRA features are on by default in this
// minor.
func EnableDRAFeatures() {}
