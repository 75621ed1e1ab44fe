package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node", "state.json")
	s, err := loadState(path)
	if err != nil || s.Before != nil || len(s.Sessions) != 0 {
		t.Fatalf("no file: %+v, %v; want an empty state", s, err)
	}
	s.Before = &Snapshot{Links: []string{"lo"}, Sysctls: map[string]string{"kernel.panic": "1"}, Paths: map[string]int{"/var/lib/cni": -1}}
	s.started(&Daemon{Name: "etcd", PID: 10, Start: 5})
	s.started(&Daemon{Name: "kubelet", PID: 20, Start: 6})
	// A daemon started again in the same session is one session.
	s.started(&Daemon{Name: "etcd", PID: 10, Start: 5})
	if err := s.save(path); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("state after save and load (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{10, 20}, got.Sessions); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("%d files beside the state, want none (no temporary file left)", len(entries)-1)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(path); err == nil {
		t.Error("a broken state file: want an error")
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c, err := ConfigFromEnv("/repo", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Root != "/var/lib/drasched-node" || c.Run != "/run/drasched-node" || c.Hostname != "drasched-node" || !c.Proxy ||
		c.LogDir != "/repo/_output/node/logs" || c.StateDir != "/repo/_output/node" || c.BinDir != "/repo/_output/node/bin" ||
		c.ClusterBinDir != "/repo/_output/cluster/bin" || c.Ports.APIServer != 16443 || c.Ports.Kubelet != 11250 {
		t.Errorf("defaults: %+v", c)
	}
	env = map[string]string{"NODE_PROXY": "0", "NODE_LOG_DIR": "_output/demo/logs/node", "NODE_KUBELET_PORT": "21250", "NODE_TAINTS": "a=b:NoSchedule"}
	if c, err = ConfigFromEnv("/repo", getenv); err != nil {
		t.Fatal(err)
	}
	if c.Proxy || c.LogDir != "/repo/_output/demo/logs/node" || c.Ports.Kubelet != 21250 || c.Taints != "a=b:NoSchedule" {
		t.Errorf("from the environment: %+v", c)
	}
	for _, bad := range []map[string]string{{"NODE_PROXY": "yes"}, {"NODE_ETCD_PORT": "x"}, {"NODE_APISERVER_PORT": "70000"}} {
		env = bad
		if _, err := ConfigFromEnv("/repo", getenv); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
	env = map[string]string{}
	c, _ = ConfigFromEnv("/repo", getenv)
	want := []string{
		"KUBECONFIG=/var/lib/drasched-node/admin.kubeconfig",
		"NODE_ROOT=/var/lib/drasched-node",
		"NODE_RUN=/run/drasched-node",
		"NODE_HOSTNAME=drasched-node",
		"NODE_LOG_DIR=/repo/_output/node/logs",
		"NODE_BIN=/repo/_output/node/bin",
		"NODE_CDI_DIR=/var/lib/drasched-node/cdi",
		"NODE_KUBELET_DIR=/var/lib/drasched-node/kubelet",
	}
	if diff := cmp.Diff(want, c.Env()); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}
}
