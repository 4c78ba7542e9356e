# SPDX-License-Identifier: Apache-2.0
# User-space mode (package usersched): the example policy the VM tests run,
# and the benchmark. Included by the top Makefile.

# Built the way a user builds a policy: `go build` against the package.
.PHONY: userspace-bins
userspace-bins:
	@mkdir -p $(BUILD)
	$(GO) build -o $(BUILD)/reservecpu ./examples/reservecpu
	$(GO) build -o $(BUILD)/bench-userspace ./bench/userspace

vm-bins: userspace-bins

# bench-userspace: USERSPACE_BOOTS boots, every variant in each, in mirrored
# pairs of boots (the second of a pair runs the first's order reversed, so a
# variant's place in the boot cancels out; an even count keeps the pairs
# whole); each boot writes its JSON, the merge takes the medians
# (one boot's keys) and the spread and judges issue 39's goals for
# user-space mode. A failed boot does not stop the others; the target fails
# at the end. USERSPACE_BASE=BINARY adds swiftlane-user-base, user-space mode
# from another build (e.g. `git worktree` of the commit before a change,
# `make build`), in the same boots: a change's effect, side by side.
USERSPACE_BOOTS ?= 4
USERSPACE_BASE  ?=
.PHONY: bench-userspace
bench-userspace: deps vm-bins peers ## User-space vs in-kernel mode, EEVDF, scx_rustland: throughput, decisions/s, critical latency; USERSPACE_BOOTS=4 boots (mirrored pairs) -> bench/results/userspace.json
	@rm -rf bench/results/userspace-boots && mkdir -p bench/results/userspace-boots
	@failed=0; for b in $$(seq 1 $(USERSPACE_BOOTS)); do \
	  echo "== bench-userspace: boot $$b of $(USERSPACE_BOOTS)"; \
	  $(VM) --kernel $(KERNEL) -- $(BUILD)/bench-userspace -boot $$b -swiftlane $(BUILD)/swiftlane $(if $(USERSPACE_BASE),-base $(USERSPACE_BASE)) \
	    -out bench/results/userspace-boots/boot-$$b.json || { echo "== bench-userspace: boot $$b failed"; failed=1; }; \
	done; \
	$(BUILD)/bench-userspace -merge -out bench/results/userspace.json bench/results/userspace-boots/boot-*.json || failed=1; \
	exit $$failed
