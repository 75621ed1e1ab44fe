// Command scheduler is drasched: kube-scheduler with the StructuredDRA
// plugin registered. It runs as a secondary scheduler; pods opt in with
// spec.schedulerName: drasched. All kube-scheduler flags apply.
//
// A configuration file is required (--config): without one kube-scheduler
// would run its default profile named default-scheduler and compete with
// the cluster's own scheduler. The file must not enable both StructuredDRA
// and the in-tree DynamicResources plugin in one profile; see
// config/scheduler-config.yaml.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric

	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs
)

func main() {
	os.Exit(cli.Run(newCommand()))
}
