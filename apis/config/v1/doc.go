// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/drasched/drasched/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io

// Package v1 holds the versioned arguments of the StructuredDRA scheduler
// plugin, as users write them in a KubeSchedulerConfiguration:
//
//	pluginConfig:
//	- name: StructuredDRA
//	  args:
//	    apiVersion: kubescheduler.config.k8s.io/v1
//	    kind: StructuredDRAArgs
//	    filterTimeout: 10s
//
// Every field is optional; SetDefaults_StructuredDRAArgs fills in what is
// left out. Conversion to the internal types of package config and
// defaulting are generated (hack/update-codegen.sh).
package v1
