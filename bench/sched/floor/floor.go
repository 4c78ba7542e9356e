// SPDX-License-Identifier: Apache-2.0

// Package floor is the benchmark's sched_ext floor: a scheduler with no
// callbacks (bpf/floor.bpf.c), run beside the real ones to tell what
// sched_ext costs on a machine from what a policy costs.
package floor

import (
	"context"
	"fmt"
	"time"

	"github.com/swiftlane/swiftlane/internal/schedext"
)

// name is the scheduler's name in bpf/floor.bpf.c, as the kernel reports it.
const name = "swiftlane_floor"

// Run attaches the floor scheduler and holds the kernel with it until ctx
// ends or the kernel ejects it.
func Run(ctx context.Context) error {
	if err := schedext.Check(); err != nil {
		return err
	}
	spec, err := schedext.OpenSpec(schedext.Objects{loadFloor, loadFloor, loadFloor})
	if err != nil {
		return err
	}
	var objs floorObjects
	if err := spec.Load(&objs, "the floor scheduler"); err != nil {
		return err
	}
	defer objs.Close()
	var links schedext.Links
	if err := links.Attach(objs.FloorOps); err != nil {
		return err
	}
	defer links.Close()
	// With no exit callback nothing tells this process that the kernel
	// ejected the scheduler; the state the kernel publishes does.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if state, ops, err := schedext.State(); err != nil || state != "enabled" || ops != name {
			return fmt.Errorf("the kernel no longer runs %s (sched_ext %q, ops %q; see dmesg)", name, state, ops)
		}
	}
}
