package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Host is where a snapshot reads the host: its files (/proc, /sys, the
// well-known paths) and what ip and nft print. LocalHost is this machine;
// tests give recorded ones.
type Host struct {
	// FS is the host's root directory.
	FS fs.FS
	// Run runs a command and returns its standard output.
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

// LocalHost is this machine.
func LocalHost() Host {
	return Host{FS: hostRoot, Run: runOutput}
}

func runOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Snapshot is what the node may change on the host and must put back.
// Take reads one; Diff compares two.
type Snapshot struct {
	// Processes are those in the node's sessions. Here and in Counts,
	// processes that have ended and wait to be reaped do not count.
	Processes []Process `json:"processes,omitempty"`
	// Counts are the processes of anyone that have the names of
	// countedNames: a kubelet, containerd, shim or runc the node lost
	// track of shows here.
	Counts    map[string]int `json:"counts"`
	Mounts    []Mount        `json:"mounts"`
	Cgroups   []string       `json:"cgroups"`
	Links     []string       `json:"links"`
	Routes    []string       `json:"routes"`
	Netfilter []string       `json:"netfilter"`
	// Sysctls are the values of sysctlNames; one that does not exist (a
	// module not loaded) is absent.
	Sysctls map[string]string `json:"sysctls"`
	// Paths are the wellKnownPaths: how many entries each has, two levels
	// deep (itself included), or -1 where it does not exist.
	Paths map[string]int `json:"paths"`
	// Own are the node's own directories (Root, Run): whether each exists.
	Own map[string]bool `json:"own"`
}

// Process is one in a session of the node.
type Process struct {
	PID     int    `json:"pid"`
	Session int    `json:"session"`
	Name    string `json:"name"`
}

// Mount is a line of /proc/self/mountinfo.
type Mount struct {
	Point string `json:"point"`
	Type  string `json:"type"`
}

// countedNames are counted whoever runs them. containerd-shim-runc-v2's
// process name is cut to 15 characters.
var countedNames = []string{"containerd", "containerd-shim", "kubelet", "kube-proxy", "runc"}

// sysctlNames are the sysctls that the kubelet (unless
// protectKernelDefaults), kube-proxy and the bridge CNI plugin may change.
var sysctlNames = []string{
	"kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory", "vm.panic_on_oom",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
	"net.ipv4.ip_forward", "net.ipv4.conf.all.route_localnet", "net.ipv4.conf.all.forwarding",
	"net.netfilter.nf_conntrack_max", "net.netfilter.nf_conntrack_tcp_timeout_established",
	"net.netfilter.nf_conntrack_tcp_timeout_close_wait", "net.netfilter.nf_conntrack_tcp_be_liberal",
	"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
}

// wellKnownPaths are those that components create wherever they are
// configured to keep their state: libcni's result cache, the kubelet's
// container log links and its device plugin socket
// (/var/lib/kubelet/device-plugins, whatever its root directory), ...
var wellKnownPaths = []string{
	"/var/lib/cni", "/var/log/containers", "/var/log/pods", "/run/containerd", "/var/run/containerd", "/run/netns",
	"/var/lib/kubelet", "/var/lib/containerd", "/etc/cni", "/var/run/cdi", "/etc/cdi", "/run/nri", "/opt/containerd",
	"/run/kubernetes", "/var/run/kubernetes", "/etc/kubernetes",
}

// Take reads the host: the processes of sessions, and own, the node's own
// directories, besides what every snapshot reads.
func Take(ctx context.Context, h Host, sessions []int, own []string) (*Snapshot, error) {
	s := &Snapshot{Counts: map[string]int{}, Sysctls: map[string]string{}, Paths: map[string]int{}, Own: map[string]bool{}}
	procs, err := listProcs(h.FS)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		// A zombie has ended: it waits for its parent (init, for an
		// orphaned daemon) to reap it, which may take a moment.
		if p.State == 'Z' {
			continue
		}
		if slices.Contains(sessions, p.Session) {
			s.Processes = append(s.Processes, Process{PID: p.PID, Session: p.Session, Name: p.Name})
		}
		if slices.Contains(countedNames, p.Name) {
			s.Counts[p.Name]++
		}
	}
	mountinfo, err := fs.ReadFile(h.FS, "proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	if s.Mounts, err = parseMountinfo(mountinfo); err != nil {
		return nil, err
	}
	if s.Cgroups, err = cgroupDirs(h.FS); err != nil {
		return nil, err
	}
	links, err := h.Run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return nil, err
	}
	if s.Links, err = parseLinks(links); err != nil {
		return nil, err
	}
	routes, err := h.Run(ctx, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	s.Routes = lines(routes)
	ruleset, err := h.Run(ctx, "nft", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	s.Netfilter = parseRuleset(ruleset)
	for _, name := range sysctlNames {
		if v, ok, err := readSysctl(h.FS, name); err != nil {
			return nil, err
		} else if ok {
			s.Sysctls[name] = v
		}
	}
	for _, p := range wellKnownPaths {
		s.Paths[p] = entries(h.FS, p)
	}
	for _, p := range own {
		_, err := fs.Stat(h.FS, rel(p))
		s.Own[p] = err == nil
	}
	return s, nil
}

// rel is an absolute path as a name in Host.FS.
func rel(p string) string {
	if p = strings.TrimPrefix(path.Clean(p), "/"); p == "" {
		return "."
	}
	return p
}

// parseMountinfo reads /proc/self/mountinfo (proc(5)): the mount point is
// the fifth field, the file system type the one after the "-".
func parseMountinfo(data []byte) ([]Mount, error) {
	var mounts []Mount
	for i, line := range lines(data) {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 5 || sep+1 >= len(f) {
			return nil, fmt.Errorf("mountinfo line %d: %q", i+1, line)
		}
		mounts = append(mounts, Mount{Point: unescapeMountinfo(f[4]), Type: f[sep+1]})
	}
	return mounts, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space)
// of a mountinfo field.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupDirs are the cgroups two levels under /sys/fs/cgroup: those of
// each v1 hierarchy, or those under the v2 root's children. process_api/
// holds this machine's sessions, which come and go.
func cgroupDirs(fsys fs.FS) ([]string, error) {
	top, err := fs.ReadDir(fsys, "sys/fs/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, t := range top {
		if !t.IsDir() {
			continue
		}
		sub, err := fs.ReadDir(fsys, "sys/fs/cgroup/"+t.Name())
		if err != nil {
			continue
		}
		for _, d := range sub {
			if d.IsDir() && d.Name() != "process_api" {
				dirs = append(dirs, "/sys/fs/cgroup/"+t.Name()+"/"+d.Name())
			}
		}
	}
	return dirs, nil
}

// parseLinks reads `ip -o link show`: "<index>: <name>[@<peer>]: ...".
func parseLinks(data []byte) ([]string, error) {
	var links []string
	for _, line := range lines(data) {
		f := strings.SplitN(line, ": ", 3)
		if len(f) < 3 {
			return nil, fmt.Errorf("ip -o link: %q", line)
		}
		name, _, _ := strings.Cut(f[1], "@")
		links = append(links, name)
	}
	return links, nil
}

var (
	nftHandle  = regexp.MustCompile(` # handle [0-9]+$`)
	nftCounter = regexp.MustCompile(`counter packets [0-9]+ bytes [0-9]+`)
)

// parseRuleset reads `nft list ruleset` without what traffic of anyone
// changes (counters) and what a rule's position gives it (handles).
func parseRuleset(data []byte) []string {
	var rules []string
	for _, line := range lines(data) {
		line = strings.TrimLeft(line, " \t")
		line = nftHandle.ReplaceAllString(line, "")
		line = nftCounter.ReplaceAllString(line, "counter")
		if line != "" {
			rules = append(rules, line)
		}
	}
	return rules
}

// netfilterTables are the tables of a parsed ruleset, as "<family> <name>".
func netfilterTables(rules []string) []string {
	var tables []string
	for _, r := range rules {
		if t, ok := strings.CutPrefix(r, "table "); ok {
			if t, ok = strings.CutSuffix(t, " {"); ok {
				tables = append(tables, t)
			}
		}
	}
	return tables
}

// sysctlPath is a sysctl's file under /proc/sys.
func sysctlPath(name string) string {
	return "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
}

func readSysctl(fsys fs.FS, name string) (string, bool, error) {
	b, err := fs.ReadFile(fsys, rel(sysctlPath(name)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return strings.TrimRight(string(b), "\n"), true, nil
}

// entries counts a path and what is under it two levels deep, as `find
// PATH -maxdepth 2 | wc -l` does (not following links); -1 when it does
// not exist.
func entries(fsys fs.FS, p string) int {
	name := rel(p)
	if _, err := fs.Stat(fsys, name); err != nil {
		return -1
	}
	n := 1
	if fi, err := fs.Lstat(fsys, name); err != nil || !fi.IsDir() {
		return n
	}
	children, _ := fs.ReadDir(fsys, name)
	for _, c := range children {
		n++
		if c.IsDir() {
			grandchildren, _ := fs.ReadDir(fsys, name+"/"+c.Name())
			n += len(grandchildren)
		}
	}
	return n
}

// lines are the lines of data without trailing white space, empty ones
// left out.
func lines(data []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), " \t"); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// section is one kind of fact, sorted.
type section struct {
	name  string
	facts []string
}

func (s *Snapshot) sections() []section {
	var procs, mounts, cgroups, links, routes, nft, sysctls, paths []string
	for _, p := range s.Processes {
		procs = append(procs, fmt.Sprintf("process %s (pid %d, session %d)", p.Name, p.PID, p.Session))
	}
	sort.Strings(procs)
	for _, name := range countedNames {
		procs = append(procs, fmt.Sprintf("process %s: %d", name, s.Counts[name]))
	}
	for _, m := range s.Mounts {
		mounts = append(mounts, "mount "+m.Point+" "+m.Type)
	}
	for _, c := range s.Cgroups {
		cgroups = append(cgroups, "cgroup "+c)
	}
	for _, l := range s.Links {
		links = append(links, "link "+l)
	}
	for _, r := range s.Routes {
		routes = append(routes, "route "+r)
	}
	// The ruleset keeps its order: a rule's place in its chain matters.
	for _, r := range s.Netfilter {
		nft = append(nft, "nft "+r)
	}
	for _, name := range sysctlNames {
		v, ok := s.Sysctls[name]
		if !ok {
			v = "(none)"
		}
		sysctls = append(sysctls, "sysctl "+name+" = "+v)
	}
	for _, p := range wellKnownPaths {
		if n, ok := s.Paths[p]; ok && n >= 0 {
			paths = append(paths, fmt.Sprintf("path %s: %d entries", p, n))
		} else {
			paths = append(paths, "path "+p+": absent")
		}
	}
	for _, p := range slices.Sorted(maps.Keys(s.Own)) {
		if s.Own[p] {
			paths = append(paths, "path "+p+": present")
		} else {
			paths = append(paths, "path "+p+": absent")
		}
	}
	for _, l := range [][]string{mounts, cgroups, links, routes} {
		sort.Strings(l)
	}
	return []section{
		{"processes: those in the node's sessions; kubelets, containerds, shims, runc of anyone", procs},
		{"mounts (mount point, type)", mounts},
		{"cgroups (two levels)", cgroups},
		{"links", links},
		{"routes", routes},
		{"netfilter (no counters, no handles)", nft},
		{"sysctls", sysctls},
		{"well-known paths", paths},
	}
}

// Facts are the snapshot's facts, one a line, sorted within each kind but
// the netfilter rules, which keep their order.
func (s *Snapshot) Facts() []string {
	var facts []string
	for _, sec := range s.sections() {
		facts = append(facts, sec.facts...)
	}
	return facts
}

// Text is the facts with a heading per kind, for reading.
func (s *Snapshot) Text() string {
	var b strings.Builder
	for _, sec := range s.sections() {
		fmt.Fprintf(&b, "# %s\n", sec.name)
		for _, f := range sec.facts {
			b.WriteString(f + "\n")
		}
	}
	return b.String()
}

// Change is a fact that one snapshot has and the other has not (or has
// fewer times: two mounts on one point are two facts).
type Change struct {
	Fact string
	// Gone: the fact was there before and is not after; otherwise it is
	// new.
	Gone bool
}

func (c Change) String() string {
	if c.Gone {
		return "- " + c.Fact
	}
	return "+ " + c.Fact
}

// Diff is what after has that s had not, and what s had that after has
// not, kind by kind, each kind's facts gone first. Netfilter rules that
// moved within the ruleset but are all there compare equal.
func (s *Snapshot) Diff(after *Snapshot) []Change {
	var changes []Change
	b, a := s.sections(), after.sections()
	for i := range b {
		count := map[string]int{}
		for _, f := range a[i].facts {
			count[f]++
		}
		for _, f := range b[i].facts {
			count[f]--
		}
		for _, f := range b[i].facts {
			if count[f] < 0 {
				changes = append(changes, Change{Fact: f, Gone: true})
				count[f]++
			}
		}
		for _, f := range a[i].facts {
			if count[f] > 0 {
				changes = append(changes, Change{Fact: f})
				count[f]--
			}
		}
	}
	return changes
}
