package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/drasched/drasched/internal/kueue"
)

// newKueueCommand runs Kueue's manager for the demo cluster until it is
// told to stop (SIGTERM, as demo.sh's teardown does).
func newKueueCommand(kubeconfig *string) *cobra.Command {
	var root, dir string
	cmd := &cobra.Command{
		Use:   "kueue",
		Short: "Install Kueue from its chart and run its manager until SIGTERM",
		Long: `kueue installs what Kueue's chart (the module pinned in hack/kueue/go.mod)
renders with hack/kueue/values.yaml and runs Kueue's manager as a process
in place of the chart's Deployment (internal/kueue). Once the manager's
webhooks answer it writes DIR/ready; on SIGTERM it stops the manager.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
			if err != nil {
				return err
			}
			ready := filepath.Join(dir, "ready")
			if err := os.Remove(ready); err != nil && !os.IsNotExist(err) {
				return err
			}
			k, err := kueue.Start(cmd.Context(), config, kueue.Options{Root: root, Dir: dir})
			if err != nil {
				return err
			}
			if err := os.WriteFile(ready, nil, 0o644); err != nil {
				_ = k.Stop()
				return err
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "Kueue's manager is ready (log: %s)\n", k.Log)
			select {
			case <-cmd.Context().Done():
				return k.Stop()
			case <-k.Exited():
				return fmt.Errorf("kueue's manager exited, see %s", k.Log)
			}
		},
	}
	cmd.Flags().StringVar(&root, "root", ".", "The repository's root (hack/kueue, hack/helm).")
	cmd.Flags().StringVar(&dir, "dir", "_output/demo/kueue", "The manager's configuration, certificates and log.")
	return cmd
}
