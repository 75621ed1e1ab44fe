package controlplane

import (
	"fmt"
	"os"
	"slices"
	"sync"
)

// processTB stands in for a testing.TB where something must outlive every
// single test: kube-apiserver's StartTestServer wants a TB for logging,
// cleanup and temporary files, and the control plane is shared by all tests
// of a binary. Cleanups run when the control plane stops.
//
// Fatal and Skip calls are only valid inside run, which turns them into an
// error: they come from StartTestServer itself, synchronously.
type processTB struct {
	name        string
	logToStderr bool

	// mutex guards cleanups and failed; Errorf may come from any goroutine.
	mutex    sync.Mutex
	cleanups []func()
	failed   bool
}

// fatal is the panic value of FailNow and friends, recovered by run.
type fatal struct{ msg string }

// run calls f and turns a Fatal/Skip call made inside it into an error.
func (tb *processTB) run(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%s: %s", tb.name, f.msg)
		}
	}()
	return f()
}

func (tb *processTB) runCleanups() {
	tb.mutex.Lock()
	cleanups := tb.cleanups
	tb.cleanups = nil
	tb.mutex.Unlock()
	for _, cleanup := range slices.Backward(cleanups) {
		cleanup()
	}
}

func (tb *processTB) hasFailed() bool {
	tb.mutex.Lock()
	defer tb.mutex.Unlock()
	return tb.failed
}

func (tb *processTB) Attr(key, value string) {}
func (tb *processTB) Chdir(dir string)       { tb.Fatalf("Chdir is not supported") }
func (tb *processTB) Cleanup(f func()) {
	tb.mutex.Lock()
	defer tb.mutex.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}
func (tb *processTB) Error(args ...any) {
	tb.Log(args...)
	tb.Fail()
}
func (tb *processTB) Errorf(format string, args ...any) {
	tb.Logf(format, args...)
	tb.Fail()
}
func (tb *processTB) Fail() {
	tb.mutex.Lock()
	defer tb.mutex.Unlock()
	tb.failed = true
}
func (tb *processTB) FailNow() {
	tb.Fail()
	panic(fatal{msg: "FailNow"})
}
func (tb *processTB) Failed() bool { return tb.hasFailed() }
func (tb *processTB) Fatal(args ...any) {
	tb.Fail()
	panic(fatal{msg: fmt.Sprint(args...)})
}
func (tb *processTB) Fatalf(format string, args ...any) {
	tb.Fail()
	panic(fatal{msg: fmt.Sprintf(format, args...)})
}
func (tb *processTB) Helper() {}
func (tb *processTB) Log(args ...any) {
	if tb.logToStderr {
		fmt.Fprintln(os.Stderr, args...)
	}
}
func (tb *processTB) Logf(format string, args ...any) {
	if tb.logToStderr {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}
func (tb *processTB) Name() string { return tb.name }
func (tb *processTB) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		tb.Fatalf("setenv %s: %v", key, err)
	}
	tb.Cleanup(func() {
		if had {
			_ = os.Setenv(key, old)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}
func (tb *processTB) Skip(args ...any)                 { tb.Fatal(args...) }
func (tb *processTB) Skipf(format string, args ...any) { tb.Fatalf(format, args...) }
func (tb *processTB) SkipNow()                         { tb.FailNow() }
func (tb *processTB) Skipped() bool                    { return false }
func (tb *processTB) TempDir() string {
	dir, err := os.MkdirTemp("", "drasched-"+tb.name)
	if err != nil {
		tb.Fatalf("create temporary directory: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
