package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
	draplugins "github.com/drasched/drasched/pkg/plugins"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

// buildScheduler builds the scheduler of the shipped configuration as
// setup does (scheduler.New: kube-scheduler registers its metrics, then
// builds the plugins, which register theirs), on a fake clientset, once
// per test binary: registration is once per process.
var buildScheduler = sync.OnceValue(func() error {
	logger := klog.Background()
	cfg, err := options.LoadConfigFromFile(logger, "../../config/scheduler-config.yaml")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	client := fake.NewClientset()
	factory := schedminor.InformerFactory(client)
	_, err = scheduler.New(ctx, client, factory, nil,
		schedminor.RecorderFactory(func(string) events.EventRecorderLogger { return events.NewFakeRecorder(100) }),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithFrameworkOutOfTreeRegistry(draplugins.Registry(dra.ProcessOptions{})),
	)
	return err
})

// registered reports whether a metric of the name is in the registry that
// /metrics serves, whether or not it has samples yet: registering a probe
// of the same name fails exactly when one is there. A histogram's series
// (_bucket, _sum, _count) count as its name.
func registered(t *testing.T, name string) bool {
	t.Helper()
	names := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, found := strings.CutSuffix(name, suffix); found {
			names = append(names, base)
		}
	}
	for _, name := range names {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of registered()"})
		if err := legacyregistry.Registerer().Register(probe); err != nil {
			return true
		}
		legacyregistry.Registerer().Unregister(probe)
	}
	return false
}

// TestMetricsRegistry: kube-scheduler and StructuredDRA register their
// metrics in one registry without a duplicate name (MustRegister would
// panic), and the names docs/scheduler.md documents are there: drasched's own and
// upstream's DRA metrics that the plugin observes.
func TestMetricsRegistry(t *testing.T) {
	if err := buildScheduler(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"drasched_plugin_filter_allocation_duration_seconds",
		"drasched_plugin_allocation_failures_total",
		"drasched_plugin_cel_cache_lookups_total",
		"drasched_plugin_cel_cache_hits_total",
		"drasched_plugin_resource_slices_prepared_total",
		"drasched_plugin_claim_writes_total",
		"drasched_plugin_claim_nominations_total",
		"drasched_plugin_claims_in_flight",
		"drasched_plugin_devices",
		minor.ClaimCreatesMetric,
		"scheduler_plugin_execution_duration_seconds",
	} {
		if !registered(t, name) {
			t.Errorf("metric %s is not registered", name)
		}
	}
	for _, name := range bindingConditionsMetrics {
		if registered(t, name) != schedminor.BindingConditionsMetrics {
			t.Errorf("metric %s registered: %v, want %v", name, !schedminor.BindingConditionsMetrics, schedminor.BindingConditionsMetrics)
		}
	}
	for _, name := range []string{
		// Renamed; see docs/install.md, "Upgrade".
		"drasched_plugin_cel_match_cache_hit_ratio",
		"drasched_plugin_resource_slices_prepared",
		// Not a metric: the probe must be able to tell.
		"drasched_plugin_no_such_metric_total",
	} {
		if registered(t, name) {
			t.Errorf("metric %s is registered", name)
		}
	}
}

// metricName matches the metric names in PromQL: drasched's, kube-scheduler's
// and the DRA library's.
var metricName = regexp.MustCompile(`\b(?:drasched|scheduler|dynamic_resource_allocation)_[a-zA-Z0-9_]+`)

// TestDashboard: every metric that the dashboard's queries name is
// registered, so that renaming a metric breaks this test, not the
// dashboard.
func TestDashboard(t *testing.T) {
	if err := buildScheduler(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../charts/drasched/dashboards/drasched.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, panel := range dashboard.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, target := range panel.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	for _, variable := range dashboard.Templating.List {
		exprs = append(exprs, variable.Definition)
	}
	var names []string
	for _, expr := range exprs {
		found := metricName.FindAllString(expr, -1)
		if len(found) == 0 && strings.Contains(expr, "(") && !strings.HasPrefix(expr, "prometheus") {
			t.Errorf("query names no metric: %s", expr)
		}
		names = append(names, found...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 5 {
		t.Fatalf("found only %v in the dashboard's queries", names)
	}
	for _, name := range names {
		if otherMinor(name) {
			continue
		}
		if !registered(t, name) {
			t.Errorf("dashboard queries %s, which is not registered", name)
		}
	}
}

// claimCreatesMetrics are the names of kube-scheduler's count of the claims
// it creates, per minor (minor.ClaimCreatesMetric): the dashboard asks for
// either, so that one dashboard serves the builds of every minor.
var claimCreatesMetrics = []string{"dynamic_resource_allocation_resourceclaim_creates_total", "scheduler_resourceclaim_creates_total"}

// bindingConditionsMetrics are kube-scheduler's metrics of binding
// conditions, from 1.36 on (schedminor.BindingConditionsMetrics).
var bindingConditionsMetrics = []string{"scheduler_dra_bindingconditions_allocations_total", "scheduler_dra_bindingconditions_wait_duration_seconds"}

// otherMinor: the dashboard names the metric for a build of another minor.
func otherMinor(name string) bool {
	if !schedminor.BindingConditionsMetrics && slices.ContainsFunc(bindingConditionsMetrics, func(m string) bool { return strings.HasPrefix(name, m) }) {
		return true
	}
	return slices.Contains(claimCreatesMetrics, name) && name != minor.ClaimCreatesMetric
}
