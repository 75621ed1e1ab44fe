package kwokcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	_ "github.com/drasched/drasched/apis/config/scheme" // StructuredDRAArgs
)

// TestSchedulerConfig: the shipped profile, loaded as kube-scheduler loads
// it, with only the overridden fields changed.
func TestSchedulerConfig(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	shipped := "../../config/scheduler-config.yaml"
	in, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	data, err := SchedulerConfig(in, SchedulerOverrides{
		Kubeconfig: "/k/kubeconfig", SchedulerName: "bench", QPS: 5000, Burst: 4000,
		Header: []string{"first line", "second line"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# first line\n# second line\n") {
		t.Errorf("no header:\n%s", data)
	}
	out := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(out, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := options.LoadConfigFromFile(logger, shipped)
	if err != nil {
		t.Fatal(err)
	}
	got, err := options.LoadConfigFromFile(logger, out)
	if err != nil {
		t.Fatal(err)
	}
	want.ClientConnection.Kubeconfig = "/k/kubeconfig"
	want.ClientConnection.QPS = 5000
	want.ClientConnection.Burst = 4000
	want.Profiles[0].SchedulerName = "bench"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration (-want +got):\n%s", diff)
	}

	if _, err := SchedulerConfig(data, SchedulerOverrides{Kubeconfig: "/other"}); err == nil || !strings.Contains(err.Error(), "already set") {
		t.Errorf("a second kubeconfig: got error %v, want one saying it is already set", err)
	}
}

func TestSchedulerConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		in        string
		overrides SchedulerOverrides
		wantErr   string
	}{
		"no kubeconfig":  {in: "profiles: []\n", wantErr: "no kubeconfig"},
		"broken YAML":    {in: "profiles: [\n", overrides: SchedulerOverrides{Kubeconfig: "/k"}, wantErr: "yaml"},
		"empty":          {in: "", overrides: SchedulerOverrides{Kubeconfig: "/k"}, wantErr: "empty configuration"},
		"two profiles":   {in: "profiles: [{schedulerName: a}, {schedulerName: b}]\n", overrides: SchedulerOverrides{Kubeconfig: "/k", SchedulerName: "x"}, wantErr: "exactly one profile"},
		"bad connection": {in: "clientConnection: 3\n", overrides: SchedulerOverrides{Kubeconfig: "/k"}, wantErr: "not a mapping"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := SchedulerConfig([]byte(tc.in), tc.overrides)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
