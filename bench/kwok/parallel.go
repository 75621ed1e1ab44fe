package main

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// parallelize calls do for each item, workers at a time
// (workqueue.ParallelizeUntil), and starts no more once ctx is done. The
// error counts the items that failed and wraps the first failure, as in
// "3 of 100 pods not created: ..."; without failures it is ctx's error.
func parallelize[T any](ctx context.Context, workers int, items []T, notDone string, do func(T) error) error {
	var mutex sync.Mutex
	var errs []error // guarded by mutex
	workqueue.ParallelizeUntil(ctx, max(1, workers), len(items), func(i int) {
		if err := do(items[i]); err != nil {
			mutex.Lock()
			defer mutex.Unlock()
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d %s: %w", len(errs), len(items), notDone, errs[0])
	}
	return ctx.Err()
}
