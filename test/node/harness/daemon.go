package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Daemon is a process the node started in a session of its own: its PID
// is its session's ID and its process group's.
type Daemon struct {
	Name string `json:"name"`
	// Args is its command line (Args[0] the binary) and Env what it has
	// besides the harness's environment: what a restart runs again.
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Log  string   `json:"log"`
	PID  int      `json:"pid"`
	// Start is the process's start time (procStat.Start).
	Start uint64 `json:"start"`
}

// stopGrace is how long a daemon has to end after SIGTERM before SIGKILL.
// A variable for the tests.
var stopGrace = 10 * time.Second

// startDaemon runs d.Args in a new session, its output appended to d.Log
// and its input /dev/null, and fills in d.PID and d.Start. The returned
// command is the child's, for noticing that it ended while this process
// waits for it.
func startDaemon(d *Daemon) (*exec.Cmd, error) {
	if err := os.MkdirAll(filepath.Dir(d.Log), 0o755); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(d.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	// A descriptor this process inherited without close-on-exec (the lock
	// of hack/test-node.sh, descriptor 9) would pass on to the daemon,
	// which would hold it for as long as it runs.
	if err := closeInheritedOnExec(); err != nil {
		return nil, err
	}
	cmd := exec.Command(d.Args[0], d.Args[1:]...)
	cmd.Env = append(os.Environ(), d.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", d.Name, err)
	}
	s, err := readStat(hostRoot, cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("%s (pid %d): %w", d.Name, cmd.Process.Pid, err)
	}
	d.PID, d.Start = s.PID, s.Start
	return cmd, nil
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
// Go opens its own so; this catches those from the parent.
func closeInheritedOnExec() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		// The descriptor of the directory being read is gone by now.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			continue
		}
		unix.CloseOnExec(fd)
	}
	return nil
}

// running says whether d's process runs: its PID names the process that
// was started, not a later one, and it has not ended (a zombie waits for
// its parent to reap it).
func (d *Daemon) running() bool {
	if d == nil || d.PID <= 0 {
		return false
	}
	s, err := readStat(hostRoot, d.PID)
	return err == nil && s.Start == d.Start && s.State != 'Z'
}

// stop ends d and its process group: SIGTERM, then SIGKILL to what is
// left of the group after stopGrace, and waits until all of it has ended.
// Processes of d's session in other groups (containerd's shims) are left:
// see Node.killLeft.
func (d *Daemon) stop() error {
	if !d.running() {
		return nil
	}
	group, err := d.openGroup()
	if err != nil {
		return err
	}
	defer closeAll(group)
	if err := signalAll(group, unix.SIGTERM); err != nil {
		return err
	}
	left, err := waitExit(group, stopGrace)
	if err != nil || len(left) == 0 {
		return err
	}
	// Again: what joined the group meanwhile gets SIGKILL too.
	rest, err := d.openGroup()
	if err != nil {
		return err
	}
	defer closeAll(rest)
	if err := signalAll(rest, unix.SIGKILL); err != nil {
		return err
	}
	if left, err = waitExit(rest, stopGrace); err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("%s (pid %d): %d processes of its group still there after SIGKILL", d.Name, d.PID, len(left))
	}
	return nil
}

// openGroup opens d's process and the rest of its process group. Each
// member is one of d's session: no other process can join a group of
// that session while any member of it lives. A process that has d's PID
// but not its start time is not d (its session ended; the PID was given
// again).
func (d *Daemon) openGroup() ([]*process, error) {
	return openMatching(func(s procStat) bool {
		return s.Group == d.PID && s.Session == d.PID && (s.PID != d.PID || s.Start == d.Start)
	})
}

func signalAll(procs []*process, sig unix.Signal) error {
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.signal(sig))
	}
	return errors.Join(errs...)
}
