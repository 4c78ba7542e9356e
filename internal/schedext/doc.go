// SPDX-License-Identifier: Apache-2.0

// Package schedext is what swiftlane's two BPF schedulers have in common:
// the kernel-mode scheduler (internal/sched) and the user-space mode's
// (usersched) both build on it, and neither imports the other.
//
// It holds what the kernel's sched_ext and swiftlane's shared BPF interface
// look like from Go:
//
//   - Check and State: can a scheduler attach here, and if not, an
//     *UnsupportedError naming the cause (ErrNoSchedExt, ErrBusy,
//     ErrPrivilege) and the fix.
//   - APILevel, OpenSpec: which sched_ext kfunc names the running kernel
//     has, and so which of a scheduler's objects to load; Spec sets its
//     constants and loads it.
//   - Links: the process-event programs and their ring (Event), and the
//     struct_ops that Attach and Detach; PumpEvents, both modes' loop from
//     that ring to the Applier.
//   - StrategyMaps: strategies into the strategy maps (an applier.Target).
//   - ExitInfo, ReadExit: why the kernel stopped a scheduler.
//
// The BPF side of that interface is in bpf/, the include directory of
// both schedulers' objects (bpf/README.md): intf.h (the shared structs) and
// schedext.h (the maps, programs and globals above, the same in both
// objects). The schedulers' bpf2go bindings stay with them: this package
// works on the *ebpf.Map and *ebpf.Variable handles they pass in, through
// its own Go types of intf.h's structs, generated here (gen.go), which
// CheckLayout compares with every object's BTF (each scheduler's tests run
// it).
//
// The package is internal: only the schedulers and the node runtime use it
// as a whole. The public usersched package re-exports, as type aliases and
// the same sentinel values, what its users must name (ExitInfo,
// UnsupportedError and its sentinels, the process events), so an
// errors.As or errors.Is in a user's program matches the errors
// internal/sched and usersched return alike, and the rest of this package
// stays free to change.
package schedext
