package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// What teardown removes is recognised as the node's by a path, a name or
// an address no other cluster uses, so nothing of anyone else's goes.

// under says whether p is dir or below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// mountsUnder are the mount points at or below any of dirs, deepest first
// (a point mounted twice, twice).
func mountsUnder(mounts []Mount, dirs ...string) []string {
	var points []string
	for _, m := range mounts {
		for _, d := range dirs {
			if under(m.Point, d) {
				points = append(points, m.Point)
				break
			}
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	return points
}

// unmount detaches every mount at or below dirs, deepest first: the
// kubelet's bind mount of its root, volumes, container root file systems,
// network namespaces, shm. It returns how many it detached.
func unmount(fsys fs.FS, dirs ...string) (int, error) {
	mountinfo, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range mountsUnder(mounts, dirs...) {
		// A mount that is gone already (its parent detached) is no error.
		if err := unix.Unmount(p, unix.MNT_DETACH); err == nil {
			n++
		}
	}
	return n, nil
}

// removeTree removes p and everything under it, unless something is
// mounted there: os.RemoveAll would go into the mount, which may be a
// host directory bound into a pod.
func removeTree(fsys fs.FS, p string) error {
	mountinfo, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return err
	}
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return err
	}
	if left := mountsUnder(mounts, p); len(left) > 0 {
		return fmt.Errorf("not removing %s: %d mounts under it (%s)", p, len(left), strings.Join(left, ", "))
	}
	return os.RemoveAll(p)
}

// cgroupRoots are the roots of the host's cgroup hierarchies:
// /sys/fs/cgroup itself under cgroup v2, each v1 hierarchy otherwise (the
// unified one of a hybrid host too).
func cgroupRoots(fsys fs.FS) ([]string, error) {
	if _, err := fs.Stat(fsys, "sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}, nil
	}
	entries, err := fs.ReadDir(fsys, "sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, e := range entries {
		// A link (cpu -> cpu,cpuacct) names a hierarchy listed anyway.
		if !e.IsDir() {
			continue
		}
		if _, err := fs.Stat(fsys, "sys/fs/cgroup/"+e.Name()+"/cgroup.procs"); err == nil {
			roots = append(roots, "/sys/fs/cgroup/"+e.Name())
		}
	}
	return roots, nil
}

// nodeCgroupParents are where the kubelet puts its cgroupRoot: under each
// root but a hybrid host's unified one, which the kubelet of a v1 host
// does not use. The kubelet refuses a cgroupRoot that does not exist.
func nodeCgroupParents(roots []string) []string {
	if len(roots) == 1 && roots[0] == "/sys/fs/cgroup" {
		return roots
	}
	var parents []string
	for _, r := range roots {
		if filepath.Base(r) != "unified" {
			parents = append(parents, r)
		}
	}
	return parents
}

// cgroupTree is every cgroup at or below dir, deepest first.
func cgroupTree(dir string) []string {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	return dirs
}

// killCgroups sends SIGKILL to every process in the cgroups at or below
// dirs: containers and pause processes that the kubelet and containerd
// did not stop.
func killCgroups(dirs []string) {
	for _, dir := range dirs {
		for _, cg := range cgroupTree(dir) {
			b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
	}
}

// removeCgroups removes the cgroups at or below dirs, deepest first, and
// returns how many it removed.
func removeCgroups(dirs []string) int {
	n := 0
	for _, dir := range dirs {
		for _, cg := range cgroupTree(dir) {
			if unix.Rmdir(cg) == nil {
				n++
			}
		}
	}
	return n
}

// removeLogLinks removes the links in dir (the kubelet's
// /var/log/containers) that point into root, and returns how many.
func removeLogLinks(dir, root string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		target, err := os.Readlink(p)
		if err != nil || !under(target, root) || target == root {
			continue
		}
		if err := os.Remove(p); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// removeCNIResults removes libcni's cached results in dir
// (/var/lib/cni/results) for network namespaces under run, and returns how
// many.
func removeCNIResults(dir, run string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	mark := []byte(`"netns":"` + run + `/`)
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, mark) {
			continue
		}
		if err := os.Remove(p); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// newTables are the netfilter tables ("<family> <name>") of `nft list
// tables` that before's ruleset did not have.
func newTables(nftTables []byte, before []string) []string {
	had := netfilterTables(before)
	var tables []string
	for _, line := range lines(nftTables) {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "table" {
			continue
		}
		if t := f[1] + " " + f[2]; !slices.Contains(had, t) {
			tables = append(tables, t)
		}
	}
	return tables
}

// listening are the TCP ports on which something listens, from
// /proc/net/tcp and /proc/net/tcp6 (what ss reads).
func listening(fsys fs.FS) (map[int]bool, error) {
	ports := map[int]bool{}
	for _, name := range []string{"proc/net/tcp", "proc/net/tcp6"} {
		b, err := fs.ReadFile(fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for i, line := range lines(b) {
			f := strings.Fields(line)
			if i == 0 || len(f) < 4 {
				continue
			}
			// st 0A is TCP_LISTEN.
			if f[3] != "0A" {
				continue
			}
			_, port, ok := strings.Cut(f[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(port, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
	}
	return ports, nil
}
