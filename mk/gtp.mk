# SPDX-License-Identifier: Apache-2.0
# The 5G user-plane lab (docs/gtp.md). Included by the top Makefile; the VM
# tests of automatic mode (test/vm/gtp_test.go) run with `make test-vm`.

# gtp5g: free5GC's UPF module, built for each lab kernel that has a headers
# package (lab/gtp5g.sh; exit 3 = none for that kernel, its VM tests skip
# the gtp5g cases and say why). The VM tests load it from .cache/gtp5g.
.PHONY: gtp5g
gtp5g: deps ## Build free5GC's gtp5g module (shared/third_party + lab/gtp5g/compat.patch) for each lab kernel into .cache/gtp5g
	@for k in $(KERNELS); do \
	  bash lab/gtp5g.sh $$k >/dev/null || [ $$? = 3 ] || exit 1; \
	done
test-vm: gtp5g

.PHONY: lab-gtp
lab-gtp: deps vm-bins gtp5g ## 5G user-plane lab in the VM: gtp and gtp5g UPFs, our gNB, UE pings traced by swiftlane
	$(VM) --kernel $(KERNEL) -- env SWIFTLANE_BIN=$(BUILD)/swiftlane $(VMTEST) -test.v -test.run 'TestGTP' -test.timeout 10m

# bench-gtp: GTP_BOOTS boots, each running every variant under the three
# loads of issue 16 (CPU hogs at 10 per vCPU, a wakeup-heavy perf messaging
# loop, both) with the variant order rotated per boot, once with the
# kernel's gtp UPF and once with free5GC's gtp5g (issue 38; same boot, the
# two runs' order alternating by boot); each run writes its JSON, the merge
# takes medians and spread into gtp.json and gtp5g.json and the PNGs.
# ~15 min per UPF and boot on a quiet host (30 on a slow one: variants
# that lose replies use their whole 2 min per load). A failed run does not
# stop the others; the target fails at the end. GTP_UPFS=gtp runs the
# in-tree UPF alone. GTP_BOOT_FIRST=N resumes a run: boots N..GTP_BOOTS,
# keeping the earlier boots' files in bench/results/gtp-boots, and merges
# them all.
GTP_BOOTS       ?= 3
GTP_BOOT_FIRST  ?= 1
GTP_UPFS        ?= gtp gtp5g
BENCH_GTP_FLAGS ?=
.PHONY: bench-gtp
bench-gtp: deps vm-bins peers gtp5g ## UE ping RTT through GTP-U, 6 variants x 3 loads + gNB restarts, gtp and gtp5g UPFs, GTP_BOOTS=3 boots -> bench/results/gtp.json, gtp5g.json + .png
	$(GO) build -o $(BUILD)/bench-gtp ./bench/gtp
	@[ "$(GTP_BOOT_FIRST)" != 1 ] || rm -rf bench/results/gtp-boots; mkdir -p bench/results/gtp-boots
	@failed=0; rev=$$(echo $(GTP_UPFS) | awk '{for (i = NF; i > 0; i--) printf "%s ", $$i}'); \
	for b in $$(seq $(GTP_BOOT_FIRST) $(GTP_BOOTS)); do \
	  upfs="$(GTP_UPFS)"; [ $$((b % 2)) = 1 ] || upfs=$$rev; \
	  echo "== bench-gtp: boot $$b of $(GTP_BOOTS) ($$upfs)"; \
	  runs=; for u in $$upfs; do \
	    runs="$$runs $(BUILD)/bench-gtp -boot $$b -upf $$u -swiftlane $(BUILD)/swiftlane \
	      -peers $(CACHE)/peers/bin -peer-errors $(CACHE)/peers/errors.json \
	      -out bench/results/gtp-boots/$$u-boot-$$b.json $(BENCH_GTP_FLAGS) || st=1;"; \
	  done; \
	  $(VM) --timeout 5000 --kernel $(KERNEL) -- bash -c "st=0; $$runs exit \$$st" || { echo "== bench-gtp: boot $$b failed"; failed=1; }; \
	done; \
	for u in $(GTP_UPFS); do \
	  res=gtp; [ $$u = gtp ] || res=$$u; \
	  $(BUILD)/bench-gtp -merge -out bench/results/$$res.json bench/results/gtp-boots/$$u-boot-*.json && \
	  $(GO) run ./bench/plot -in bench/results/$$res.json -out bench/results/$$res.png -unit ms -title "bench-gtp: UE ping RTT through GTP-U ($$u UPF)" \
	    -cdf-title 'UE RTT under 10 hogs per vCPU, all boots (CDF)' || failed=1; \
	done; exit $$failed

# bench-gtp-scale: what the tracer costs per packet at 1, 16 and 128 UEs
# (issue 38): each UE count gets its own lab, the gNB and the other UEs'
# traffic (`lab traffic --pps GTP_SCALE_PPS`: every UE but the pinging one sends that
# many echo requests/s; UE 1 pings every 100 ms, so a UE count N puts about
# N x GTP_SCALE_PPS round trips/s through the UPF), and is measured in 3
# rounds with and without the tracer (alone: `swiftlane trace gtp`, EEVDF
# schedules), the order alternating. UE 1's RTT from 300 pings a run; the
# tracer's run time from the kernel's BPF statistics; the guest's CPU busy
# share per run, so a UE count that saturates the guest without the tracer
# is marked so (its overhead is then queueing, not the tracer's cost). It
# prints the docs/gtp.md table at the end (`bench-gtp -scale-table FILE`
# prints it again). ~15 min a boot. Another rate into its own file, e.g.
# `make bench-gtp-scale GTP_SCALE_PPS=2 GTP_SCALE_OUT=bench/results/gtp-scale-2pps.json`.
GTP_SCALE_UES ?= 1,16,128
GTP_SCALE_PPS ?= 10
GTP_SCALE_UPF ?= gtp5g
GTP_SCALE_OUT ?= bench/results/gtp-scale.json
# Rounds per UE count and boot (each: one run with, one without the tracer,
# order alternating, and starting the other way in every other boot), and
# boots. Three rounds in one boot did not settle 128 UEs at 2 pps
# (docs/gtp.md): with 6 or more rounds in all, the finding is judged on the
# median overhead's 95 % confidence interval over the paired rounds, pooled
# across boots (each boot's report in GTP_SCALE_OUT's -boots directory).
GTP_SCALE_ROUNDS ?= 3
GTP_SCALE_BOOTS  ?= 1
# More bench-gtp flags, e.g. -scale-every=1h: the tracer's programs attached
# with its user-space side all but idle, to split its in-kernel cost from the rest.
GTP_SCALE_FLAGS  ?=
GTP_SCALE_DIR     = $(basename $(GTP_SCALE_OUT))-boots
.PHONY: bench-gtp-scale
bench-gtp-scale: deps vm-bins gtp5g ## Tracer CPU per packet, UE RTT with/without it and guest saturation at 1, 16, 128 UEs, 3 rounds -> bench/results/gtp-scale.json
	$(GO) build -o $(BUILD)/bench-gtp ./bench/gtp
	@rm -rf $(GTP_SCALE_DIR); mkdir -p $(GTP_SCALE_DIR)
	@for b in $$(seq 1 $(GTP_SCALE_BOOTS)); do \
	  echo "== bench-gtp-scale: boot $$b of $(GTP_SCALE_BOOTS)"; \
	  $(VM) --timeout 3600 --kernel $(KERNEL) -- $(BUILD)/bench-gtp -boot $$b -scale $(GTP_SCALE_UES) -scale-rounds $(GTP_SCALE_ROUNDS) \
	    -samples 300 -interval 100ms -pps $(GTP_SCALE_PPS) -upf $(GTP_SCALE_UPF) -swiftlane $(BUILD)/swiftlane \
	    $(GTP_SCALE_FLAGS) -out $(GTP_SCALE_DIR)/boot-$$b.json || exit 1; \
	done
	$(BUILD)/bench-gtp -scale-merge -out $(GTP_SCALE_OUT) $(GTP_SCALE_DIR)/boot-*.json
