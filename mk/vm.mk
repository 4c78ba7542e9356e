# SPDX-License-Identifier: Apache-2.0
# The VM lab: a Debian sched_ext kernel under QEMU (TCG), see lab/.
# Included by the top Makefile.

# Kernels the scheduler tests run on: the newest 6.18 (old kfunc API) and the
# newest sched_ext kernel in trixie-backports.
KERNELS ?= older newest
KERNEL  ?= newest
VMTEST  := $(BUILD)/vmtest.test
VM      := bash lab/vm.sh

.PHONY: vm-bins
vm-bins: build
	$(GO) test -c -tags vmtest -o $(VMTEST) ./test/vm
	$(GO) build -o $(BUILD)/bench-sched ./bench/sched

.PHONY: test-vm
test-vm: deps vm-bins ## Scheduler tests on real sched_ext kernels in the VM lab (fails if the VM cannot boot)
	@for k in $(KERNELS); do \
	  cycles=5; [ "$$k" = newest ] && cycles=20; \
	  echo "== VM tests on kernel '$$k' ($$cycles attach/detach cycles)"; \
	  $(VM) --timeout 2700 --kernel $$k -- env SWIFTLANE_BIN=$(BUILD)/swiftlane SWL_ATTACH_CYCLES=$$cycles $(VMTEST) -test.v -test.timeout 40m || exit 1; \
	done
	@# The torture suite once more on SMT siblings and two last-level caches,
	@# where idle-core and cache-sibling placement have choices to make.
	@echo "== VM torture on kernel 'newest', topology 2 sockets x 1 core x 2 threads"
	$(VM) --timeout 1200 --kernel newest --topology 2,1,2 -- env SWIFTLANE_BIN=$(BUILD)/swiftlane SWL_TORTURE_MODES=kernel \
	  $(VMTEST) -test.v -test.run TestTorture -test.timeout 15m

.PHONY: vm-shell
vm-shell: deps vm-bins ## Interactive root shell in the VM lab (KERNEL=newest|older|VERSION)
	$(VM) --kernel $(KERNEL) shell

.PHONY: peers
peers: deps ## Build scx_bpfland and scx_rustland from crates.io for side-by-side runs (~10 min)
	bash lab/peers.sh

.PHONY: bench-sched
bench-sched: deps vm-bins peers ## Scheduler latency benchmark, all variants in one boot -> bench/results/sched.json + .png
	$(VM) --kernel $(KERNEL) -- $(BUILD)/bench-sched -swiftlane $(BUILD)/swiftlane -out bench/results/sched.json
	$(GO) run ./bench/plot -in bench/results/sched.json -out bench/results/sched.png

.PHONY: demo
demo: deps vm-bins ## Build, boot the lab, attach swiftlane, show saturated vs critical latency, detach
	$(VM) --kernel $(KERNEL) -- bash lab/demo.sh
