//go:build !kube1.35

package tracker_test

import "k8s.io/client-go/tools/cache"

// HasSyncedChecker: from 1.36 on (client-go), an event handler's
// registration also says when it synced through a checker.
func (syncedRegistration) HasSyncedChecker() cache.DoneChecker { return syncedChecker{} }

type syncedChecker struct{}

func (syncedChecker) Name() string { return "lagging informer" }
func (syncedChecker) Done() <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}
