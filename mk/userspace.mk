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

.PHONY: bench-userspace
bench-userspace: deps vm-bins peers ## User-space vs in-kernel mode, EEVDF, scx_rustland: throughput, decisions/s, critical latency -> bench/results/userspace.json
	$(VM) --kernel $(KERNEL) -- $(BUILD)/bench-userspace -swiftlane $(BUILD)/swiftlane -out bench/results/userspace.json
