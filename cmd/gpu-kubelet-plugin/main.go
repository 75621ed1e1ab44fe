// Command gpu-kubelet-plugin is the node-side GPU DRA driver of drasched.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/drasched/drasched/pkg/driver/gpu/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
