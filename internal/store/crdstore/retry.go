// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/swiftlane/swiftlane/internal/store"
)

// writeTimeout bounds the conflict retries of a write whose context has no
// deadline of its own (the API's HTTP requests have none).
const writeTimeout = 30 * time.Second

// conflictBackoff spaces the tries of a write that conflicted. A fixed
// count of immediate re-reads lost writes when several replicas wrote one
// object at once: the writers re-collided in lockstep. The first retry comes
// after a few milliseconds (the write that won is usually through by then),
// the gap doubles up to half a second, and each gap is stretched by up to
// 100 % at random so colliding writers drift apart.
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Duration: 5 * time.Millisecond, Factor: 2, Jitter: 1, Steps: math.MaxInt32, Cap: 500 * time.Millisecond}
}

// ConflictError is a write that kept conflicting with other writers until
// its deadline. It unwraps to the API server's last Conflict.
type ConflictError struct {
	What     string // "update strategy a"
	Attempts int
	For      time.Duration
	Err      error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: changed by other writers on each of %d tries over %s, until the request's deadline: retry, or give the request a longer deadline: %v",
		e.What, e.Attempts, e.For.Round(time.Millisecond), e.Err)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// Is makes a ConflictError store.ErrBusy.
func (e *ConflictError) Is(target error) bool { return target == store.ErrBusy }

// retryConflicts runs try until it returns anything but a Conflict, backing
// off between tries (conflictBackoff), until ctx ends or, without a
// deadline, writeTimeout has passed; then it returns a *ConflictError. try
// re-reads what it writes from the API server after a conflict.
func retryConflicts(ctx context.Context, what string, try func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeTimeout)
		defer cancel()
	}
	b := conflictBackoff()
	start := time.Now()
	var conflict error // the last Conflict
	for attempt := 1; ; attempt++ {
		err := try(ctx)
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			conflict = err
		case conflict != nil && ctx.Err() != nil:
			// The deadline fell inside a try that followed conflicts.
			return &ConflictError{What: what, Attempts: attempt - 1, For: time.Since(start), Err: conflict}
		default:
			return err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return &ConflictError{What: what, Attempts: attempt, For: time.Since(start), Err: conflict}
		case <-t.C:
		}
	}
}
