# SPDX-License-Identifier: Apache-2.0
# The VM lab: a Debian sched_ext kernel under QEMU (TCG), see lab/.
# Included by the top Makefile.

# Kernels the scheduler tests run on: the newest 6.18 (old kfunc API) and the
# newest sched_ext kernel in trixie-backports.
KERNELS ?= older newest
KERNEL  ?= newest
VMTEST  := $(BUILD)/vmtest.test
VM      := bash lab/vm.sh

.PHONY: vm-bins bench-sched-bin
vm-bins: build bench-sched-bin
	$(GO) test -c -tags vmtest -o $(VMTEST) ./test/vm

bench-sched-bin:
	$(GO) build -o $(BUILD)/bench-sched ./bench/sched

# Attach/detach cycles under load per kernel: each load parses BTF and runs
# the verifier under TCG (10-40 s with hogs on every CPU), so CI runs 10 on
# the newest kernel and 5 on 6.18; ATTACH_CYCLES=20 is the full run.
ATTACH_CYCLES ?= 10
# lab/vm.sh's own handling of a QEMU abort, injected (lab/selftest.sh): a
# boot aborted before the command is retried, one aborted during it is not.
.PHONY: test-lab
test-lab: deps ## The lab's handling of a QEMU abort before and during the command, injected (lab/selftest.sh; two real boots, ~70 s)
	bash lab/selftest.sh $(KERNEL)

.PHONY: test-vm
test-vm: deps vm-bins test-lab ## Scheduler tests on real sched_ext kernels in the VM lab (fails if the VM cannot boot)
	@# TestDashboard (the Grafana panels' queries against a real Prometheus)
	@# runs on the newest kernel only: the metrics it queries are the same on
	@# both, and it is a minute of CI's time.
	@for k in $(KERNELS); do \
	  cycles=5 skip=; [ "$$k" = newest ] && cycles=$(ATTACH_CYCLES); [ "$$k" = newest ] || skip='^TestDashboard$$'; \
	  echo "== VM tests on kernel '$$k' ($$cycles attach/detach cycles$${skip:+, skipping $$skip})"; \
	  $(VM) --timeout 2700 --kernel $$k -- env SWIFTLANE_BIN=$(BUILD)/swiftlane SWL_ATTACH_CYCLES=$$cycles $(VMTEST) -test.v -test.timeout 40m -test.skip "$$skip" || exit 1; \
	done
	@# The torture suite once more on SMT siblings and two last-level caches,
	@# where idle-core and cache-sibling placement have choices to make: the
	@# strategies case of each mode (critical pool, hand-off and placement
	@# together; the cases without strategies ran in the suites above), for
	@# CI's time. `-test.run TestTorture` there runs all four.
	@echo "== VM torture on kernel 'newest', topology 2 sockets x 1 core x 2 threads"
	$(VM) --timeout 1200 --kernel newest --topology 2,1,2 -- env SWIFTLANE_BIN=$(BUILD)/swiftlane \
	  $(VMTEST) -test.v -test.run 'TestTorture//strategies' -test.timeout 15m

.PHONY: vm-shell
vm-shell: deps vm-bins ## Interactive root shell in the VM lab (KERNEL=newest|older|VERSION)
	$(VM) --kernel $(KERNEL) shell

.PHONY: peers
peers: deps ## Build scx_bpfland, scx_rustland, scx_layered and scx_lavd from crates.io for side-by-side runs (~20 min once)
	bash lab/peers.sh

# The scheduler's benchmark suite (bench/sched): SCHED_BOOTS boots, every
# variant in each, the order rotated by one per boot; each boot writes its
# JSON, then the merge takes medians and spread into sched.json (with the
# torture tally of bench-torture) and the PNG. ~15 min per boot. QUICK=1 is
# the smoke run: one boot of 3 s phases, into build/bench-sched-quick/, so
# bench/results/ keeps the real run. A failed boot does not stop the others;
# the target fails at the end. SCHED_PROFILE=heavy runs the heavy
# saturation profile (bench/sched/profile.go: a busy node's mixed background
# beside the hogs) into sched-heavy.json, .png and sched-heavy-boots/,
# beside the default profile's sched.json.
SCHED_BOOTS       ?= 3
SCHED_PROFILE     ?= default
BENCH_SCHED_FLAGS ?=
SCHED_OUT         := bench/results
ifeq ($(QUICK),1)
SCHED_BOOTS       := 1
SCHED_OUT         := $(BUILD)/bench-sched-quick
override BENCH_SCHED_FLAGS += -quick
endif
ifeq ($(filter $(SCHED_PROFILE),default heavy),)
$(error SCHED_PROFILE=$(SCHED_PROFILE): unknown saturation profile, use default or heavy (bench/sched/profile.go))
endif
SCHED_NAME        := $(if $(filter default,$(SCHED_PROFILE)),sched,sched-$(SCHED_PROFILE))
SCHED_TITLE       := bench-sched$(if $(filter default,$(SCHED_PROFILE)),, ($(SCHED_PROFILE) profile))

.PHONY: bench-sched
bench-sched: deps vm-bins peers ## Scheduler benchmark suite: 7 variants x probe, cyclictest, perf messaging/pipe, hackbench, hogs, nginx; SCHED_BOOTS=3 boots -> bench/results/sched.json + .png (SCHED_PROFILE=heavy: sched-heavy.json; QUICK=1: smoke run)
	@rm -rf $(SCHED_OUT)/$(SCHED_NAME)-boots && mkdir -p $(SCHED_OUT)/$(SCHED_NAME)-boots
	@failed=0; \
	for b in $$(seq 1 $(SCHED_BOOTS)); do \
	  echo "== bench-sched: profile $(SCHED_PROFILE), boot $$b of $(SCHED_BOOTS)"; \
	  $(VM) --timeout 5400 --kernel $(KERNEL) -- $(BUILD)/bench-sched -boot $$b -profile $(SCHED_PROFILE) -swiftlane $(BUILD)/swiftlane \
	    -peers $(CACHE)/peers/bin -peer-errors $(CACHE)/peers/errors.json \
	    -out $(SCHED_OUT)/$(SCHED_NAME)-boots/boot-$$b.json $(BENCH_SCHED_FLAGS) || { echo "== bench-sched: boot $$b failed"; failed=1; }; \
	done; \
	$(BUILD)/bench-sched -merge -torture bench/results/torture.json -out $(SCHED_OUT)/$(SCHED_NAME).json $(SCHED_OUT)/$(SCHED_NAME)-boots/boot-*.json && \
	$(GO) run ./bench/plot -in $(SCHED_OUT)/$(SCHED_NAME).json -out $(SCHED_OUT)/$(SCHED_NAME).png -title "$(SCHED_TITLE)" && exit $$failed

# TestTorture (test/vm/torture_test.go) TORTURE_RUNS times per kernel, each
# run in a boot of its own (a run that wedges the kernel must not take the
# next ones with it); SWL_TORTURE_SECONDS sets the stress per case (the
# test's default: 20 s; 4 cases a run, kernel and user-space mode with and
# without strategies: ~2 min a run with its boot, ~80 min for 2 x 20).
# Logs in $(CACHE)/torture; the tally in bench/results/torture.json, which
# bench-sched's merge copies into sched.json.
TORTURE_RUNS    ?= 20
TORTURE_KERNELS ?= $(KERNELS)

.PHONY: bench-torture
bench-torture: deps vm-bins ## TestTorture TORTURE_RUNS=20 times per kernel, a boot each -> bench/results/torture.json {kernel: {runs, survived}} (~80 min)
	bash mk/bench-torture.sh --runs $(TORTURE_RUNS) --logs $(CACHE)/torture --out bench/results/torture.json \
	  --vmtest $(VMTEST) --swiftlane $(BUILD)/swiftlane --tally $(BUILD)/bench-sched $(TORTURE_KERNELS)

.PHONY: demo
demo: deps build bench-sched-bin ## Build, boot the lab, attach swiftlane, detach; probe latency idle and saturated in 5 rotated rounds, the host's load, a verdict
	$(BUILD)/bench-sched -demo-host -in $(BUILD)/demo-rounds.json -out bench/results/demo.json -- \
	  $(VM) --kernel $(KERNEL) -- bash lab/demo.sh $(BUILD)
