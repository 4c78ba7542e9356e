# SPDX-License-Identifier: Apache-2.0
# Service load balancer (internal/lb): tests and benchmark. Included by the
# top Makefile. Both targets need root: they load BPF and build network
# namespaces (everything they create stays inside those namespaces).

LB_BENCH_FLAGS ?=
LB_LOADGEN     ?= $(CACHE)/lb/loadgen
# Services in every variant's NAT setup: the measured one and LB_SERVICES-1
# dummies (kube-proxy's iptables mode walks one rule per Service port).
LB_SERVICES    ?= 1

# internal/lb/kubesource runs a real kube-apiserver (internal/kubetest), hence
# k8s-bins and $(K8S_ENV) (mk/k8s.mk); without SWL_K8S_BIN those tests skip.
.PHONY: test-lb
test-lb: k8s-bins ## LB: Go unit + BPF_PROG_TEST_RUN + netns end-to-end + Kubernetes source tests (root; fails instead of skipping)
	bash mk/lb-deps.sh
	$(K8S_ENV) SWIFTLANE_REQUIRE_NETNS=1 $(GO) test -count=1 -p 1 -timeout 6m ./internal/lb/... ./bench/lb/...

.PHONY: bench-lb
# A full run is 6 rounds x 5 variants x 2 paths x 2.5 phases of 20 s: ~55 min,
# with nothing else on the machine. Smoke test: LB_BENCH_FLAGS='-duration 3s
# -repeats 1 -out /tmp/lb.json -png-dir /tmp'. With many Services:
# LB_SERVICES=2000; issue 15's goals were measured there with
# LB_BENCH_FLAGS='-rate 10000 -out ...' (README). After a change to the
# statistics: bench-lb -reanalyse FILE -out FILE (no measuring).
#
# Side by side with a previous build (a change to the LB against what it
# replaces, in the same rounds): LB_BASELINE=PATH runs that binary exactly
# like this tree's as the variant swiftlane-baseline, and the report adds a
# table of the two per path and metric (ratio, per-round ratio, whether the
# difference is beyond the spread). LB_VARIANTS picks the variants, e.g.
# LB_VARIANTS=swiftlane,swiftlane-baseline (6 rounds: ~25 min). Such a run
# writes bench/results/lb-baseline.json and its PNGs under
# bench/results/lb-baseline/, leaving lb.json to the full comparison.
LB_BASELINE ?=
LB_VARIANTS ?=
LB_OUT      ?= $(if $(LB_BASELINE),bench/results/lb-baseline.json,bench/results/lb.json)
LB_PNG_DIR  ?= $(if $(LB_BASELINE),bench/results/lb-baseline,bench/results)
bench-lb: build $(LB_LOADGEN) ## LB: none vs iptables vs nftables vs IPVS vs swiftlane in netns, 5 interleaved rounds -> bench/results/lb.json (root, ~45 min; LB_BASELINE=old binary side by side)
	bash mk/lb-deps.sh
	@mkdir -p bench/results $(LB_PNG_DIR)
	$(GO) run ./bench/lb -loadgen $(LB_LOADGEN) -swiftlane $(BUILD)/swiftlane -out $(LB_OUT) -png-dir $(LB_PNG_DIR) -services $(LB_SERVICES) \
	  $(if $(LB_BASELINE),-baseline $(LB_BASELINE)) $(if $(LB_VARIANTS),-variants $(LB_VARIANTS)) $(LB_BENCH_FLAGS)

# IPVS needs the kernel's ip_vs, which a host kernel may lack (this one
# does): the same benchmark in the VM lab on Debian's sched_ext kernel, whose
# modules include it. Under TCG every variant is many times slower than on
# the host, so compare variants within this run only, never with lb.json.
# Shorter phases and 4 rounds (two mirrored pairs) keep it near 33 min; the open-loop phase runs
# at 200 connections/s, since TCG tops out near 1,500/s.
LB_VM_FLAGS ?= -duration 10s -repeats 4 -rate 200
.PHONY: bench-lb-vm
bench-lb-vm: deps build $(LB_LOADGEN) ## LB: the same comparison with IPVS, in the VM lab (TCG) -> bench/results/lb-vm.json (root, ~33 min)
	bash mk/lb-deps.sh
	@mkdir -p bench/results/lb-vm
	$(GO) build -o $(BUILD)/bench-lb ./bench/lb
	lab/vm.sh --kernel $(KERNEL) --cpus 2 --memory 2G --timeout 3600 -- \
	  $(BUILD)/bench-lb -loadgen $(LB_LOADGEN) -swiftlane $(BUILD)/swiftlane -out bench/results/lb-vm.json -png-dir bench/results/lb-vm -services $(LB_SERVICES) $(LB_VM_FLAGS)

# The open-loop load generator (C, no dependencies beyond libc).
$(LB_LOADGEN): bench/lb/loadgen/loadgen.c
	@mkdir -p $(dir $@)
	$(CLANG) -O2 -Wall -Wextra -Werror -o $@ $<
