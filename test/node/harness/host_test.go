package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

// recorded is a host made of testdata/host/<name> and the given files
// (path relative to the root: content), with the sysctls of sysctls
// (name: value) and processes (stat lines).
type recorded struct {
	name      string
	files     map[string]string
	sysctls   map[string]string
	processes []string
}

func (r recorded) host(t *testing.T) Host {
	t.Helper()
	fsys := fstest.MapFS{}
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "host", r.name, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fsys["proc/self/mountinfo"] = &fstest.MapFile{Data: read("mountinfo")}
	for name, v := range r.sysctls {
		fsys[rel(sysctlPath(name))] = &fstest.MapFile{Data: []byte(v + "\n")}
	}
	for _, p := range r.processes {
		pid, _, _ := strings.Cut(p, " ")
		fsys["proc/"+pid+"/stat"] = &fstest.MapFile{Data: []byte(p + "\n")}
	}
	for name, content := range r.files {
		if strings.HasSuffix(name, "/") {
			fsys[strings.TrimSuffix(name, "/")] = &fstest.MapFile{Mode: os.ModeDir | 0o755}
			continue
		}
		fsys[name] = &fstest.MapFile{Data: []byte(content)}
	}
	outputs := map[string][]byte{
		"ip -o link show":            read("ip-link"),
		"ip -4 route show table all": read("ip-route"),
		"nft list ruleset":           read("nft-ruleset"),
	}
	return Host{FS: fsys, Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		cmd := strings.Join(append([]string{name}, args...), " ")
		out, ok := outputs[cmd]
		if !ok {
			return nil, fmt.Errorf("%s: not recorded", cmd)
		}
		return out, nil
	}}
}

// stat is a line of /proc/<pid>/stat with the fields a snapshot reads.
func stat(pid int, name string, session int, start uint64) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", pid, name, session, session, start)
}

// hostSysctls are the sysctls of the recorded host before the node.
var hostSysctls = map[string]string{
	"kernel.panic": "1", "kernel.panic_on_oops": "0", "vm.overcommit_memory": "0", "vm.panic_on_oom": "0",
	"kernel.keys.root_maxkeys": "1000000", "kernel.keys.root_maxbytes": "25000000",
	"net.ipv4.ip_forward": "0", "net.ipv4.conf.all.route_localnet": "0", "net.ipv4.conf.all.forwarding": "0",
	// No conntrack or bridge module loaded: those sysctls do not exist.
}

func withSysctls(over map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range hostSysctls {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// beforeHost is the host as the node finds it: someone else's containerd
// (session 50) and the machine's own processes.
func beforeHost() recorded {
	return recorded{
		name:    "before",
		sysctls: hostSysctls,
		processes: []string{
			stat(1, "init", 0, 1),
			stat(50, "containerd", 50, 100),
			stat(77, "a (b) c", 77, 200),
			// Ended, waiting for its parent: no kubelet.
			strings.Replace(stat(78, "kubelet", 78, 300), ") S ", ") Z ", 1),
		},
		files: map[string]string{
			"sys/fs/cgroup/cpu/cgroup.procs":                 "",
			"sys/fs/cgroup/cpu/user.slice/":                  "",
			"sys/fs/cgroup/cpu/process_api/":                 "",
			"sys/fs/cgroup/memory/cgroup.procs":              "",
			"var/log/pods/":                                  "",
			"var/log/pods/ns_pod_uid/":                       "",
			"var/log/pods/ns_pod_uid/c/":                     "",
			"var/log/pods/ns_pod_uid/c/0.log":                "deeper than two levels: not counted",
			"var/log/pods/other.log":                         "",
			"var/lib/drasched-node/leftover-from-an-old-run": "",
		},
	}
}

// upHost is the host with the node up: its daemons in sessions 100
// (containerd, with a shim) and 200 (kubelet), a container in its own
// session, and what the node changed.
func upHost() recorded {
	r := beforeHost()
	r.name = "up"
	r.sysctls = withSysctls(map[string]string{"kernel.panic": "10", "net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"})
	r.processes = append(r.processes,
		stat(100, "containerd", 100, 1000),
		stat(101, "containerd-shim", 100, 1100),
		stat(102, "pause", 102, 1101),
		stat(200, "kubelet", 200, 2000),
		// A shim that ended and waits for init to reap it.
		strings.Replace(stat(103, "containerd-shim", 100, 1200), ") S ", ") Z ", 1),
	)
	r.files["sys/fs/cgroup/cpu/drasched-node/"] = ""
	r.files["var/lib/cni/results/drasched-node-abc-eth0"] = "{}"
	r.files["run/drasched-node/containerd.sock"] = ""
	return r
}

var nodeOwn = []string{"/var/lib/drasched-node", "/run/drasched-node"}

func take(t *testing.T, r recorded, sessions ...int) *Snapshot {
	t.Helper()
	s, err := Take(t.Context(), r.host(t), sessions, nodeOwn)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTake(t *testing.T) {
	s := take(t, upHost(), 100, 200)
	facts := s.Facts()
	for _, want := range []string{
		// The node's sessions' processes, whatever they run; a container
		// in a session of its own is not one of them.
		"process containerd (pid 100, session 100)",
		"process containerd-shim (pid 101, session 100)",
		"process kubelet (pid 200, session 200)",
		// Counted whoever runs them.
		"process containerd: 2",
		"process containerd-shim: 1",
		"process kube-proxy: 0",
		// Mounts with their type; octal escapes undone.
		"mount /var/lib/drasched-node/kubelet ext4",
		"mount /run/drasched-node/containerd/io.containerd.grpc.v1.cri/netns/cni-66c5cafb-e65d-f15d-6f7a-bf15c5d4ab56 nsfs",
		"mount /sys/fs/cgroup/unified cgroup2",
		"cgroup /sys/fs/cgroup/cpu/drasched-node",
		"cgroup /sys/fs/cgroup/cpu/user.slice",
		// A veth's peer is not part of its name.
		"link veth01c47b4e",
		"link drasched0",
		"route 10.244.0.0/24 dev drasched0 proto kernel scope link src 10.244.0.1",
		// Rules without counters and handles.
		"nft tcp dport 22 counter accept",
		"nft ct state new  counter jump KUBE-SERVICES",
		"nft table ip filter {",
		"sysctl kernel.panic = 10",
		"sysctl net.netfilter.nf_conntrack_max = (none)",
		"sysctl net.bridge.bridge-nf-call-iptables = 1",
		"path /var/lib/cni: 3 entries",
		// var/log/pods, its two children, and the child of the
		// directory among them; not what is deeper.
		"path /var/log/pods: 4 entries",
		"path /var/lib/kubelet: absent",
		"path /run/drasched-node: present",
		"path /var/lib/drasched-node: present",
	} {
		if !slices.Contains(facts, want) {
			t.Errorf("no fact %q in\n%s", want, s.Text())
		}
	}
	for _, f := range facts {
		if strings.Contains(f, "packets") || strings.Contains(f, "# handle") {
			t.Errorf("fact with what traffic changes: %q", f)
		}
		if strings.Contains(f, "process_api") || strings.Contains(f, "(pid 102,") || strings.Contains(f, "(pid 103,") || strings.Contains(f, "(pid 50,") {
			t.Errorf("fact about what is not the node's: %q", f)
		}
	}
	if got := strings.Count(s.Text(), "\n# ") + 1; got != len(s.sections()) {
		t.Errorf("Text has %d headings, want one per kind of fact (%d)", got, len(s.sections()))
	}
}

func TestTakeReportsCommandErrors(t *testing.T) {
	h := beforeHost().host(t)
	run := h.Run
	h.Run = func(ctx context.Context, name string, args ...string) ([]byte, error) {
		if name == "nft" {
			return nil, fmt.Errorf("nft: Operation not permitted")
		}
		return run(ctx, name, args...)
	}
	if _, err := Take(t.Context(), h, nil, nodeOwn); err == nil || !strings.Contains(err.Error(), "Operation not permitted") {
		t.Errorf("Take with a failing nft: error %v, want nft's", err)
	}
}

func TestDiff(t *testing.T) {
	before := take(t, beforeHost())
	for name, tc := range map[string]struct {
		after func() recorded
		// sessions of the node when after was taken
		sessions []int
		want     []Change
	}{
		"what only time changes is no change": {
			after: func() recorded {
				r := beforeHost()
				// Someone else's process came, the node's sessions are
				// empty, the counters counted on.
				r.processes = append(r.processes, stat(300, "sleep", 300, 3000))
				return r
			},
			sessions: []int{100, 200},
		},
		"the node up": {
			after:    upHost,
			sessions: []int{100, 200},
			want: []Change{
				{Fact: "process containerd: 1", Gone: true},
				{Fact: "process containerd-shim: 0", Gone: true},
				{Fact: "process kubelet: 0", Gone: true},
				{Fact: "process containerd (pid 100, session 100)"},
				{Fact: "process containerd-shim (pid 101, session 100)"},
				{Fact: "process kubelet (pid 200, session 200)"},
				{Fact: "process containerd: 2"},
				{Fact: "process containerd-shim: 1"},
				{Fact: "process kubelet: 1"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			after := take(t, tc.after(), tc.sessions...)
			got := before.Diff(after)
			if name != "the node up" {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("Diff (-want +got):\n%s", diff)
				}
				return
			}
			// The processes come first, those gone before those new; check
			// them exactly, the rest by
			// what must be there.
			if diff := cmp.Diff(tc.want, got[:len(tc.want)]); diff != "" {
				t.Errorf("Diff's processes (-want +got):\n%s", diff)
			}
			for _, want := range []Change{
				{Fact: "mount /var/lib/drasched-node/kubelet ext4"},
				{Fact: "cgroup /sys/fs/cgroup/cpu/drasched-node"},
				{Fact: "link drasched0"},
				{Fact: "nft table ip filter {"},
				{Fact: "sysctl kernel.panic = 1", Gone: true},
				{Fact: "sysctl kernel.panic = 10"},
				{Fact: "sysctl net.bridge.bridge-nf-call-iptables = (none)", Gone: true},
				{Fact: "path /var/lib/cni: absent", Gone: true},
				{Fact: "path /var/lib/cni: 3 entries"},
				{Fact: "path /run/drasched-node: absent", Gone: true},
				{Fact: "path /run/drasched-node: present"},
			} {
				if !slices.Contains(got, want) {
					t.Errorf("Diff has no %v; it is\n%v", want, got)
				}
			}
			for _, c := range got {
				if strings.Contains(c.Fact, "tcp dport 22") || strings.Contains(c.Fact, "/dev/shm") {
					t.Errorf("Diff has %v, which did not change", c)
				}
			}
		})
	}
}

// TestDiffCountsRepeatedFacts: a point mounted twice is two facts, and one
// of them gone is a change.
func TestDiffCountsRepeatedFacts(t *testing.T) {
	before := &Snapshot{Mounts: []Mount{{"/dev/shm", "tmpfs"}, {"/dev/shm", "tmpfs"}, {"/x", "tmpfs"}}}
	after := &Snapshot{Mounts: []Mount{{"/dev/shm", "tmpfs"}, {"/x", "tmpfs"}, {"/x", "tmpfs"}}}
	want := []Change{{Fact: "mount /dev/shm tmpfs", Gone: true}, {Fact: "mount /x tmpfs"}}
	if diff := cmp.Diff(want, before.Diff(after)); diff != "" {
		t.Errorf("Diff (-want +got):\n%s", diff)
	}
	if got := before.Diff(before); len(got) != 0 {
		t.Errorf("a snapshot differs from itself: %v", got)
	}
}

func TestParseMountinfo(t *testing.T) {
	got, err := parseMountinfo([]byte(`27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
45 27 0:41 / /var/lib/drasched-node/kubelet/pods/a/volumes/kubernetes.io~empty-dir/with\040space rw shared:3 master:1 - tmpfs tmpfs rw
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{{"/", "ext4"}, {"/var/lib/drasched-node/kubelet/pods/a/volumes/kubernetes.io~empty-dir/with space", "tmpfs"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseMountinfo (-want +got):\n%s", diff)
	}
	if _, err := parseMountinfo([]byte("27 1 254:0 / / rw\n")); err == nil {
		t.Error("a line without the separator: want an error")
	}
}

func TestParseStat(t *testing.T) {
	for name, tc := range map[string]struct {
		line    string
		want    procStat
		wantErr bool
	}{
		"plain": {
			line: "10129 (cat) R 10122 10122 26545 0 -1 4194304 99 0 0 0 0 0 0 0 20 0 1 0 717906 3133440 362 18446744073709551615",
			want: procStat{PID: 10129, Name: "cat", State: 'R', Group: 10122, Session: 26545, Start: 717906},
		},
		"a name with spaces and parentheses": {
			line: stat(7, "a) (b", 5, 99),
			want: procStat{PID: 7, Name: "a) (b", State: 'S', Group: 5, Session: 5, Start: 99},
		},
		"cut short": {line: "7 (x) S 1 2 3", wantErr: true},
		"no name":   {line: "7 x S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat: error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
}
