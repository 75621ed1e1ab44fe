// Command node runs the real node of make test-node and make demo
// REAL_NODE=1 on this host (test/node/harness); hack/node.sh builds and
// runs it.
//
//	node up [IMAGE_TARBALL...]                  control plane and node
//	node up --kubeconfig FILE --ca FILE [...]   the node alone, joining that cluster
//	node down                                   stop it, put the host back, check
//	node restart-kubelet                        stop and start the kubelet
//	node env                                    KUBECONFIG and the node's paths
//
// The environment says where the node lives (hack/node.sh lists the
// variables).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/drasched/drasched/test/node/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "node: %v\nusage: node up [--kubeconfig FILE --ca FILE] [IMAGE_TARBALL...] | down | restart-kubelet | env\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "node: %v\n", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{errors.New("no command")}
	}
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	cfg, err := harness.ConfigFromEnv(repo, os.Getenv)
	if err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	if cmd == "env" {
		fmt.Println(strings.Join(cfg.Env(), "\n"))
		return nil
	}
	n, err := harness.New(cfg, os.Stdout)
	if err != nil {
		return err
	}
	switch cmd {
	case "up":
		fs := flag.NewFlagSet("up", flag.ContinueOnError)
		kubeconfig := fs.String("kubeconfig", "", "join the cluster of this kubeconfig instead of starting a control plane")
		ca := fs.String("ca", "", "with --kubeconfig: the CA of that cluster's API server and clients")
		if err := fs.Parse(args); err != nil {
			return usageError{err}
		}
		if (*kubeconfig == "") != (*ca == "") {
			return usageError{errors.New("--kubeconfig and --ca go together")}
		}
		if *kubeconfig != "" {
			fmt.Printf("==> real node %s joins the cluster of %s: %s, %s; logs in %s\n", cfg.Hostname, *kubeconfig, cfg.Root, cfg.Run, cfg.LogDir)
			return n.Join(ctx, *kubeconfig, *ca, fs.Args())
		}
		fmt.Printf("==> real node %s: %s, %s; logs in %s\n", cfg.Hostname, cfg.Root, cfg.Run, cfg.LogDir)
		return n.Up(ctx, fs.Args())
	case "down":
		if len(args) > 0 {
			return usageError{fmt.Errorf("down takes no arguments, got %q", args)}
		}
		fmt.Printf("==> stopping real node %s\n", cfg.Hostname)
		return errors.Join(n.Down(ctx), n.CheckClean(ctx))
	case "restart-kubelet":
		if len(args) > 0 {
			return usageError{fmt.Errorf("restart-kubelet takes no arguments, got %q", args)}
		}
		return n.RestartKubelet(ctx)
	default:
		return usageError{fmt.Errorf("unknown command %q", cmd)}
	}
}
