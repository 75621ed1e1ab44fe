package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startTestDaemon starts a bash script as a daemon. The script tells
// what it started by writing PIDs to the FIFOs $DIR/<name> of fifos, which
// pid reads: a read waits for the script to write.
func startTestDaemon(t *testing.T, script string, fifos ...string) (d *Daemon, pid func(name string) int) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range fifos {
		if err := unix.Mkfifo(filepath.Join(dir, f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	d = &Daemon{Name: "test", Args: []string{bash, "-c", script}, Env: []string{"DIR=" + dir}, Log: filepath.Join(dir, "test.log")}
	cmd, err := startDaemon(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The group, and the daemon itself should it have no group of
		// its own: Wait waits for the daemon only.
		_ = unix.Kill(-d.PID, unix.SIGKILL)
		_ = unix.Kill(d.PID, unix.SIGKILL)
		_ = cmd.Wait()
	})
	return d, func(name string) int {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return pid
	}
}

// alive: the process runs (a zombie has ended; it waits for its parent).
func alive(pid int) bool {
	s, err := readStat(hostRoot, pid)
	return err == nil && s.State != 'Z'
}

// TestDaemonSession: a daemon leads a session and a process group of its
// own, with its output in its log and the harness's environment and its
// own; stop ends it and the rest of its group, and leaves its session's
// other groups (containerd's shims) to Node.killLeft.
func TestDaemonSession(t *testing.T) {
	d, pid := startTestDaemon(t, `echo "out $DIR"; sleep 600 & echo $! >"$DIR/child"; set -m; sleep 600 & echo $! >"$DIR/other-group"; wait`,
		"child", "other-group")
	child, other := pid("child"), pid("other-group")
	t.Cleanup(func() {
		_ = unix.Kill(child, unix.SIGKILL)
		_ = unix.Kill(other, unix.SIGKILL)
	})
	s, err := readStat(hostRoot, d.PID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Session != d.PID || s.Group != d.PID || s.Start != d.Start {
		t.Fatalf("daemon pid %d: session %d, group %d, start %d; want its own session and group, start %d", d.PID, s.Session, s.Group, s.Start, d.Start)
	}
	os2, err := readStat(hostRoot, other)
	if err != nil {
		t.Fatal(err)
	}
	if os2.Session != d.PID || os2.Group == d.PID {
		t.Fatalf("the job of set -m: session %d, group %d; want the daemon's session in another group", os2.Session, os2.Group)
	}
	if !d.running() {
		t.Fatal("the daemon does not run")
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if d.running() || alive(child) {
		t.Errorf("after stop: daemon running %v, its child %d alive %v", d.running(), child, alive(child))
	}
	if !alive(other) {
		t.Errorf("stop ended %d, of another group of the daemon's session", other)
	}
	if b, _ := os.ReadFile(d.Log); string(b) != "out "+filepath.Dir(d.Log)+"\n" {
		t.Errorf("log %q, want the daemon's output with its environment", b)
	}
}

// TestDaemonStopEscalates: a daemon that ignores SIGTERM gets SIGKILL.
func TestDaemonStopEscalates(t *testing.T) {
	grace := stopGrace
	stopGrace = 300 * time.Millisecond
	t.Cleanup(func() { stopGrace = grace })
	d, pid := startTestDaemon(t, `trap '' TERM; echo $$ >"$DIR/ready"; while :; do sleep 1; done`, "ready")
	pid("ready")
	start := time.Now()
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if d.running() {
		t.Error("still running after stop")
	}
	if took := time.Since(start); took < stopGrace {
		t.Errorf("stopped after %s, before the grace period %s", took, stopGrace)
	}
}

// TestDaemonPIDReused: a recorded daemon whose PID now names another
// process (a later start time) is not running, and stop leaves that
// process alone.
func TestDaemonPIDReused(t *testing.T) {
	d, pid := startTestDaemon(t, `echo $$ >"$DIR/ready"; exec sleep 600`, "ready")
	pid("ready")
	other := *d
	other.Start--
	if other.running() {
		t.Error("a daemon with another start time than its PID's process runs")
	}
	if err := other.stop(); err != nil {
		t.Fatal(err)
	}
	if !d.running() {
		t.Error("stop of a daemon whose PID was reused ended the process that has the PID now")
	}
}

// TestStartDaemonClosesInherited: a descriptor the harness inherited
// without close-on-exec does not reach the daemon.
func TestStartDaemonClosesInherited(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	// Dup's descriptor is not close-on-exec, as one from a parent shell.
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("dup'ed descriptor is close-on-exec")
	}
	// The daemon tells whether it has the descriptor.
	_, pid := startTestDaemon(t, `if [ -e /proc/$$/fd/`+strconv.Itoa(fd)+` ]; then echo 1 >"$DIR/has"; else echo 0 >"$DIR/has"; fi; exec sleep 600`, "has")
	if pid("has") != 0 {
		t.Errorf("the daemon has descriptor %d of the harness", fd)
	}
}

// TestWaitExit: a pidfd tells that a process that is no child of the
// waiter ended.
func TestWaitExit(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	s, err := readStat(hostRoot, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p, err := openProcess(s)
	if err != nil || p == nil {
		t.Fatalf("openProcess: %v, %v", p, err)
	}
	defer p.close()
	if left, err := waitExit([]*process{p}, 50*time.Millisecond); err != nil || len(left) != 1 {
		t.Fatalf("waitExit of a running process: %d left, %v; want it left", len(left), err)
	}
	stdin.Close()
	if left, err := waitExit([]*process{p}, 10*time.Second); err != nil || len(left) != 0 {
		t.Fatalf("waitExit of an ended process: %d left, %v; want none", len(left), err)
	}
}
