package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// procStat is what /proc/<pid>/stat says of a process.
type procStat struct {
	PID     int
	Name    string // comm: the binary's name, cut to 15 bytes
	State   byte   // R, S, D, Z (ended, not yet reaped), ...
	Group   int    // process group ID
	Session int
	// Start is when the process started, in clock ticks after boot: with
	// the PID, it names one process, not a later one given the same PID.
	Start uint64
}

// parseStat reads a line of /proc/<pid>/stat (proc(5)).
func parseStat(line []byte) (procStat, error) {
	// The name is in parentheses and may hold spaces and parentheses
	// itself: it ends at the last ')'.
	open, end := bytes.IndexByte(line, '('), bytes.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("no (name) in %q", line)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(line[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("pid in %q: %w", line, err)
	}
	// After the name: state(3) ppid(4) pgrp(5) session(6) ... starttime(22).
	fields := bytes.Fields(line[end+1:])
	if len(fields) < 20 {
		return procStat{}, fmt.Errorf("%d fields after the name in %q, want 20 or more", len(fields), line)
	}
	s := procStat{PID: pid, Name: string(line[open+1 : end]), State: fields[0][0]}
	if s.Group, err = strconv.Atoi(string(fields[2])); err != nil {
		return procStat{}, fmt.Errorf("process group in %q: %w", line, err)
	}
	if s.Session, err = strconv.Atoi(string(fields[3])); err != nil {
		return procStat{}, fmt.Errorf("session in %q: %w", line, err)
	}
	if s.Start, err = strconv.ParseUint(string(fields[19]), 10, 64); err != nil {
		return procStat{}, fmt.Errorf("start time in %q: %w", line, err)
	}
	return s, nil
}

// readStat reads the stat of one process from fsys, the host's root.
func readStat(fsys fs.FS, pid int) (procStat, error) {
	b, err := fs.ReadFile(fsys, "proc/"+strconv.Itoa(pid)+"/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// listProcs reads the stat of every process on the host; those that end
// while it reads are left out.
func listProcs(fsys fs.FS) ([]procStat, error) {
	entries, err := fs.ReadDir(fsys, "proc")
	if err != nil {
		return nil, err
	}
	var procs []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readStat(fsys, pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return nil, err
		}
		procs = append(procs, s)
	}
	return procs, nil
}

// hostRoot is the host's file system, where the node's own process
// handling reads /proc.
var hostRoot = os.DirFS("/")

// process is a pidfd of a process: signals sent through it reach that
// process or none, never a later one with the same PID.
type process struct {
	procStat
	fd int
}

// openProcess opens a pidfd for s. It returns nil, nil when the process
// has ended, or when its PID now names another one.
func openProcess(s procStat) (*process, error) {
	fd, err := unix.PidfdOpen(s.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd of %d: %w", s.PID, err)
	}
	// The pidfd names whatever had the PID when it was opened: if that
	// still has s's start time, it is s.
	now, err := readStat(hostRoot, s.PID)
	if err != nil || now.Start != s.Start {
		_ = unix.Close(fd)
		return nil, nil
	}
	return &process{procStat: now, fd: fd}, nil
}

func (p *process) signal(sig unix.Signal) error {
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

func (p *process) close() { _ = unix.Close(p.fd) }

// openMatching opens the processes for which match is true.
func openMatching(match func(procStat) bool) ([]*process, error) {
	procs, err := listProcs(hostRoot)
	if err != nil {
		return nil, err
	}
	var open []*process
	for _, s := range procs {
		if !match(s) {
			continue
		}
		p, err := openProcess(s)
		if err != nil {
			closeAll(open)
			return nil, err
		}
		if p != nil {
			open = append(open, p)
		}
	}
	return open, nil
}

func closeAll(procs []*process) {
	for _, p := range procs {
		p.close()
	}
}

// waitExit waits up to timeout for every process to end (a pidfd becomes
// readable when its process ends, whoever its parent is) and returns those
// still running.
func waitExit(procs []*process, timeout time.Duration) ([]*process, error) {
	deadline := time.Now().Add(timeout)
	left := procs
	for len(left) > 0 {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		fds := make([]unix.PollFd, len(left))
		for i, p := range left {
			fds[i] = unix.PollFd{Fd: int32(p.fd), Events: unix.POLLIN}
		}
		_, err := unix.Poll(fds, int(remaining.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return left, fmt.Errorf("poll pidfds: %w", err)
		}
		var running []*process
		for i, p := range left {
			if fds[i].Revents == 0 {
				running = append(running, p)
			}
		}
		left = running
	}
	return left, nil
}
