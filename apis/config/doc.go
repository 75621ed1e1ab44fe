// Package config holds the arguments of the StructuredDRA scheduler plugin
// (StructuredDRAArgs): internal types here, versioned types in v1, with
// defaulting, validation and a scheme, in the style of kube-scheduler's own
// plugin arguments.
//
// The types arrive with the scheduler plugin; until then this package only
// documents where they will live.
package config
