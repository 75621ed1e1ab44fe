package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// helperEnv makes the test binary hold a lock instead of running tests:
// TestAcrossProcesses starts it to hold the lock from another process.
const helperEnv = "FLOCK_HELPER_PATH"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		lock, err := Acquire(context.Background(), path)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		// Hold the lock until the parent closes stdin.
		_, _ = os.Stdin.Read(make([]byte, 1))
		_ = lock.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestAcrossProcesses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "lock")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	buf := make([]byte, 7)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("helper: %q, %v", buf, err)
	}

	// While the other process holds the lock, Acquire waits until its
	// context ends.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if lock, err := Acquire(short, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while held elsewhere: lock %v, error %v; want a deadline error", lock, err)
	}

	// Once the other process lets go, Acquire succeeds.
	_ = stdin.Close()
	lock, err := Acquire(ctx, path)
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	if err := lock.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestWithinProcess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "lock")
	first, err := Acquire(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan *Lock)
	go func() {
		lock, err := Acquire(ctx, path)
		if err != nil {
			t.Errorf("second Acquire: %v", err)
		}
		acquired <- lock
	}()
	select {
	case <-acquired:
		t.Fatal("second Acquire succeeded while the first lock is held")
	case <-time.After(100 * time.Millisecond):
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if second := <-acquired; second != nil {
		_ = second.Release()
	}
}

func TestAcquireBadPath(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	if _, err := Acquire(ctx, filepath.Join(t.TempDir(), "missing", "lock")); err == nil {
		t.Error("Acquire in a missing directory succeeded")
	}
}
