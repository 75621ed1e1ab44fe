package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestMountsUnder(t *testing.T) {
	mounts, err := parseMountinfo(mustRead(t, "testdata/host/up/mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	got := mountsUnder(append(mounts,
		// Beside the node's directory, not in it.
		Mount{Point: "/var/lib/drasched-node-other", Type: "tmpfs"},
		// Mounted twice.
		Mount{Point: "/var/lib/drasched-node/kubelet", Type: "ext4"},
	), "/var/lib/drasched-node", "/run/drasched-node")
	if len(got) != 22 {
		t.Errorf("%d mounts under the node's directories, want the 21 recorded and one of them again:\n%s", len(got), strings.Join(got, "\n"))
	}
	// Deepest first: nothing comes after a mount that is under it.
	for i := range got {
		for _, later := range got[i+1:] {
			if strings.HasPrefix(later, got[i]+"/") {
				t.Errorf("%s before %s, which is under it", got[i], later)
			}
		}
	}
	if slices.Contains(got, "/var/lib/drasched-node-other") || slices.Contains(got, "/") {
		t.Errorf("mounts outside the node's directories: %v", got)
	}
	if i := slices.Index(got, "/var/lib/drasched-node/kubelet"); i < 0 || got[i+1] != got[i] {
		t.Errorf("the kubelet's root, mounted twice, is not there twice: %v", got)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRemoveTreeRefusesMounts(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "node")
	if err := os.MkdirAll(filepath.Join(node, "kubelet", "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounted := fstest.MapFS{"proc/self/mountinfo": {Data: []byte("45 27 254:0 /x " + node + "/kubelet/pods rw - ext4 /dev/vda rw\n")}}
	if err := removeTree(mounted, node); err == nil || !strings.Contains(err.Error(), "mounts under it") {
		t.Errorf("removeTree with a mount under the tree: %v, want a refusal", err)
	}
	if !exists(node) {
		t.Fatal("removeTree removed a tree with a mount under it")
	}
	clear := fstest.MapFS{"proc/self/mountinfo": {Data: []byte("27 1 254:0 / / rw - ext4 /dev/vda rw\n")}}
	if err := removeTree(clear, node); err != nil || exists(node) {
		t.Errorf("removeTree without mounts: %v, exists %v", err, exists(node))
	}
}

func TestCgroupRoots(t *testing.T) {
	for name, tc := range map[string]struct {
		fs          fstest.MapFS
		roots, node []string
	}{
		"v1 with a unified hierarchy": {
			fs: fstest.MapFS{
				"sys/fs/cgroup/cpu/cgroup.procs":       {},
				"sys/fs/cgroup/memory/cgroup.procs":    {},
				"sys/fs/cgroup/unified/cgroup.procs":   {},
				"sys/fs/cgroup/cpu,cpuacct":            {Mode: os.ModeSymlink, Data: []byte("cpu")},
				"sys/fs/cgroup/not-a-hierarchy/x":      {},
				"sys/fs/cgroup/unified/cgroup.threads": {},
			},
			roots: []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"},
			node:  []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory"},
		},
		"v2": {
			fs: fstest.MapFS{
				"sys/fs/cgroup/cgroup.controllers":         {},
				"sys/fs/cgroup/cgroup.procs":               {},
				"sys/fs/cgroup/system.slice/cgroup.procs":  {},
				"sys/fs/cgroup/system.slice/cgroup.events": {},
			},
			roots: []string{"/sys/fs/cgroup"},
			node:  []string{"/sys/fs/cgroup"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			roots, err := cgroupRoots(tc.fs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.roots, roots); diff != "" {
				t.Errorf("cgroupRoots (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.node, nodeCgroupParents(roots)); diff != "" {
				t.Errorf("nodeCgroupParents (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCgroupTreeDeepestFirst(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"drasched-node/kubepods/pod1/c1", "drasched-node/kubepods/pod2", "drasched-node/besteffort"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "drasched-node")
	tree := cgroupTree(root)
	if len(tree) != 6 || tree[len(tree)-1] != root {
		t.Fatalf("cgroupTree: %v, want six with the root last", tree)
	}
	// Plain directories stand for cgroups here: rmdir works alike.
	if n := removeCgroups([]string{root}); n != 6 || exists(root) {
		t.Errorf("removeCgroups removed %d, root there %v; want all six", n, exists(root))
	}
}

func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "containers")
	results := filepath.Join(dir, "results")
	for _, d := range []string{logs, results} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"node_pod_c-1.log":  "/var/lib/drasched-node/pod-logs/ns_pod_uid/c/0.log",
		"other_pod_c-1.log": "/var/log/pods/ns_pod_uid/c/0.log",
		"beside_c-1.log":    "/var/lib/drasched-node-old/pod-logs/x/0.log",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(logs, name)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"drasched-node-a-eth0": `{"kind":"cniCacheV1","netns":"/run/drasched-node/containerd/io.containerd.grpc.v1.cri/netns/cni-1"}`,
		"other-net-b-eth0":     `{"kind":"cniCacheV1","netns":"/var/run/netns/cni-2"}`,
		"beside-c-eth0":        `{"kind":"cniCacheV1","netns":"/run/drasched-node-old/netns/cni-3"}`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(results, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := removeLogLinks(logs, "/var/lib/drasched-node"); err != nil || n != 1 {
		t.Errorf("removeLogLinks: %d, %v; want 1", n, err)
	}
	if n, err := removeCNIResults(results, "/run/drasched-node"); err != nil || n != 1 {
		t.Errorf("removeCNIResults: %d, %v; want 1", n, err)
	}
	for _, p := range []string{"containers/node_pod_c-1.log", "results/drasched-node-a-eth0"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s is the node's and still there", p)
		}
	}
	for _, p := range []string{"containers/other_pod_c-1.log", "containers/beside_c-1.log", "results/other-net-b-eth0", "results/beside-c-eth0"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s is not the node's and is gone", p)
		}
	}
	if n, err := removeLogLinks(filepath.Join(dir, "missing"), "/x"); err != nil || n != 0 {
		t.Errorf("removeLogLinks of a missing directory: %d, %v", n, err)
	}
}

func TestNewTables(t *testing.T) {
	before := parseRuleset(mustRead(t, "testdata/host/before/nft-ruleset"))
	tables := "table inet host\ntable ip mangle\ntable ip filter\ntable ip6 nat\n"
	want := []string{"ip mangle", "ip filter", "ip6 nat"}
	if diff := cmp.Diff(want, newTables([]byte(tables), before)); diff != "" {
		t.Errorf("newTables (-want +got):\n%s", diff)
	}
}

func TestListening(t *testing.T) {
	fsys := fstest.MapFS{
		"proc/net/tcp": {Data: []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 492 1 0 100 0 0 10 0
   1: 0100007F:2B5A 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 493 1 0 100 0 0 10 0
`)},
		"proc/net/tcp6": {Data: []byte(`  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:403B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
`)},
	}
	ports, err := listening(fsys)
	if err != nil {
		t.Fatal(err)
	}
	// 0x07E8 and 0x403B listen; 0x2B5A (11098) is a connection's.
	want := map[int]bool{2024: true, 16443: true}
	if diff := cmp.Diff(want, ports); diff != "" {
		t.Errorf("listening (-want +got):\n%s", diff)
	}
}
