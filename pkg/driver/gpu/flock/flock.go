// Package flock serialises the GPU driver's Prepare and Unprepare calls
// across processes with flock(2). Two plugin processes on one node exist
// during a rolling update; without the lock both could read the same
// checkpoint, each give a GPU to a different claim, and each write back a
// checkpoint that loses the other's claim.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pollInterval is how often Acquire retries a held lock. flock has no
// timeout, and a blocking flock cannot be interrupted by a context.
const pollInterval = 20 * time.Millisecond

// Lock is a held exclusive lock.
type Lock struct {
	file *os.File
}

// Acquire takes an exclusive lock on path, creating the file if needed, and
// waits until it is free or ctx is done. The lock is released by Release or
// when the process exits, so a crashed holder never blocks the next one.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		err := unix.Flock(int(file.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Lock{file: file}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = file.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = file.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, context.Cause(ctx))
		case <-ticker.C:
		}
	}
}

// Release unlocks. Closing the descriptor releases the flock.
func (l *Lock) Release() error {
	if err := l.file.Close(); err != nil {
		return fmt.Errorf("release lock %s: %w", l.file.Name(), err)
	}
	return nil
}
