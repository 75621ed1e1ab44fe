package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
)

// defaultHealthAddress is where `run` serves /healthz and `healthcheck`
// asks: loopback, so that only the plugin's own pod (the liveness probe,
// an exec probe) reaches it.
const defaultHealthAddress = "127.0.0.1:8081"

// pluginHealth is what /healthz asks the running plugin.
type pluginHealth interface {
	CheckRegistration() error
	CheckPublishing() error
}

// healthCheck is one named check of /healthz.
type healthCheck struct {
	name  string
	check func() error
}

// healthChecks are the checks of /healthz. /healthz answers 200 "ok" when
// all pass and 500 "unhealthy: <check>,..." when some fail, naming them but
// never saying why: the reasons (API errors, paths of the node) are for
// the plugin's log, which gets a line when a check starts failing, fails
// for another reason, or passes again. Probing more often does not log
// more. Methods are safe for concurrent use.
type healthChecks struct {
	checks []healthCheck

	mu sync.Mutex
	// failing holds, per failing check, the reason last logged. Guarded
	// by mu.
	failing map[string]string
}

// newHealthChecks returns the plugin's checks: kubelet-registration and
// resourceslice-publishing. plugin returns nil while the plugin starts,
// when every check passes.
func newHealthChecks(plugin func() pluginHealth) *healthChecks {
	check := func(f func(pluginHealth) error) func() error {
		return func() error {
			if p := plugin(); p != nil {
				return f(p)
			}
			return nil
		}
	}
	return &healthChecks{checks: []healthCheck{
		{name: "kubelet-registration", check: check(pluginHealth.CheckRegistration)},
		{name: "resourceslice-publishing", check: check(pluginHealth.CheckPublishing)},
	}}
}

// run runs the checks, logs what changed, and returns the names of the
// failed ones.
func (h *healthChecks) run(ctx context.Context) []string {
	logger := klog.FromContext(ctx)
	var failed []string
	reasons := map[string]string{}
	for _, c := range h.checks {
		if err := c.check(); err != nil {
			failed = append(failed, c.name)
			reasons[c.name] = err.Error()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.checks {
		reason, failing := reasons[c.name]
		last, wasFailing := h.failing[c.name]
		switch {
		case failing && (!wasFailing || reason != last):
			logger.Info("Health check failing", "check", c.name, "reason", reason)
		case !failing && wasFailing:
			logger.Info("Health check passing again", "check", c.name)
		}
	}
	h.failing = reasons
	return failed
}

// handler serves GET /healthz; other paths are not found.
func (h *healthChecks) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed := h.run(r.Context()); len(failed) > 0 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = fmt.Fprintf(w, "unhealthy: %s\n", strings.Join(failed, ","))
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// newHealthcheckCommand is the liveness probe: it asks the running
// plugin's /healthz on loopback, from inside its container.
func newHealthcheckCommand(logging *pflag.FlagSet) *cobra.Command {
	address := defaultHealthAddress
	// Inside the DaemonSet's probe timeoutSeconds (5).
	timeout := 3 * time.Second
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Ask the plugin running in this container whether it is healthy (the liveness probe)",
		Long: `healthcheck asks /healthz of the plugin that runs in the same network namespace
(the same pod), prints its answer and exits 0 when it is healthy, 1 when it
is not or does not answer. The DaemonSet's liveness probe runs it; the
endpoint listens on loopback, so no other pod can reach it. Why a check
fails is in the plugin's log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return healthcheck(cmd.Context(), cmd.OutOrStdout(), address, timeout)
		},
	}
	fss := &cliflag.NamedFlagSets{}
	fs := fss.FlagSet("healthcheck")
	fs.StringVar(&address, "health-probe-bind-address", address, "Address the plugin serves /healthz on (run's --health-probe-bind-address).")
	fs.DurationVar(&timeout, "timeout", timeout, "How long to wait for the answer.")
	setHelp(cmd, fss, logging)
	return cmd
}

// healthcheck asks http://address/healthz and prints the answer.
func healthcheck(ctx context.Context, out io.Writer, address string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+"/healthz", nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("ask the plugin's health: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return fmt.Errorf("read the plugin's health: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	_, _ = out.Write(body)
	return nil
}
