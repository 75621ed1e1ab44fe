// Package plugins holds drasched's scheduler plugins, one package each:
// StructuredDRA (dra) and StructuredDRAPreemption (drapreemption), which
// sees the StructuredDRA plugin of its profile through dra.Nominator, with
// the queue sort that lets its nominees bind first.
package plugins

import (
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/drasched/drasched/pkg/plugins/dra"
	"github.com/drasched/drasched/pkg/plugins/drapreemption"
)

// Registry is the plugins that drasched adds to kube-scheduler's, by name:
// StructuredDRA with the process options, StructuredDRAPreemption and
// StructuredDRAQueueSort. It
// is the one list of them: cmd/scheduler registers it, and the tests and
// benchmarks that build a scheduler of the shipped profile use it, so a
// plugin the profile enables is never missing there.
func Registry(opts dra.ProcessOptions) frameworkruntime.Registry {
	return frameworkruntime.Registry{
		dra.Name:                    dra.Factory(opts),
		drapreemption.Name:          drapreemption.New,
		drapreemption.QueueSortName: drapreemption.NewQueueSort,
	}
}
