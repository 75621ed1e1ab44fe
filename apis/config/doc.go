// +k8s:deepcopy-gen=package
// +groupName=kubescheduler.config.k8s.io

// Package config holds the internal types of the StructuredDRA scheduler
// plugin's arguments, StructuredDRAArgs, in the style of kube-scheduler's own
// plugin arguments (k8s.io/kubernetes/pkg/scheduler/apis/config).
//
// Users write the versioned form (package v1, apiVersion
// kubescheduler.config.k8s.io/v1, kind StructuredDRAArgs) in a
// KubeSchedulerConfiguration's pluginConfig. The scheduler decodes it,
// applies the defaults of package v1 and converts it into these types, which
// have no pointers: every field holds its effective value. Package scheme
// installs both forms into kube-scheduler's configuration scheme; package
// validation checks the result.
package config
