package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

func TestParallelize(t *testing.T) {
	items := make([]int, 100)
	for i := range items {
		items[i] = i
	}
	errOdd := errors.New("odd")
	for name, tc := range map[string]struct {
		workers int
		do      func(int) error
		cancel  bool
		wantRun int64
		wantErr string
	}{
		"all succeed":          {workers: 4, do: func(int) error { return nil }, wantRun: 100},
		"no workers means one": {workers: 0, do: func(int) error { return nil }, wantRun: 100},
		"failures counted": {
			workers: 8,
			do: func(i int) error {
				if i%2 == 1 {
					return fmt.Errorf("item %d: %w", i, errOdd)
				}
				return nil
			},
			wantRun: 100,
			wantErr: "50 of 100 items not done: item ",
		},
		"cancelled before": {workers: 4, do: func(int) error { return nil }, cancel: true, wantErr: context.Canceled.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			var ran atomic.Int64
			err := parallelize(ctx, tc.workers, items, "items not done", func(i int) error {
				ran.Add(1)
				return tc.do(i)
			})
			if got := ran.Load(); got != tc.wantRun {
				t.Errorf("ran %d items, want %d", got, tc.wantRun)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr != "" && tc.do(1) != nil && !errors.Is(err, errOdd):
				t.Errorf("error %v does not wrap the failure", err)
			}
		})
	}
}
