# SPDX-License-Identifier: Apache-2.0
# The 5G user-plane lab (docs/gtp.md). Included by the top Makefile; the VM
# tests of automatic mode (test/vm/gtp_test.go) run with `make test-vm`.

.PHONY: lab-gtp
lab-gtp: deps vm-bins ## 5G user-plane lab in the VM: kernel gtp UPF, our gNB, UE pings traced by swiftlane
	$(VM) --kernel $(KERNEL) -- env SWIFTLANE_BIN=$(BUILD)/swiftlane $(VMTEST) -test.v -test.run 'TestGTP' -test.timeout 10m

# bench-gtp: GTP_BOOTS boots, each running every variant under the three
# loads of issue 16 (CPU hogs at 10 per vCPU, a wakeup-heavy perf messaging
# loop, both) with the variant order rotated per boot; each boot writes its
# JSON, the merge takes medians and spread into gtp.json and the PNG.
# ~15 min per boot. A failed boot does not stop the others; the target fails
# at the end.
GTP_BOOTS       ?= 3
BENCH_GTP_FLAGS ?=
.PHONY: bench-gtp
bench-gtp: deps vm-bins peers ## UE ping RTT through GTP-U, 6 variants x 3 loads + gNB restarts, GTP_BOOTS=3 boots -> bench/results/gtp.json + .png
	$(GO) build -o $(BUILD)/bench-gtp ./bench/gtp
	@rm -rf bench/results/gtp-boots && mkdir -p bench/results/gtp-boots
	@failed=0; \
	for b in $$(seq 1 $(GTP_BOOTS)); do \
	  echo "== bench-gtp: boot $$b of $(GTP_BOOTS)"; \
	  $(VM) --timeout 2400 --kernel $(KERNEL) -- $(BUILD)/bench-gtp -boot $$b -swiftlane $(BUILD)/swiftlane \
	    -peers $(CACHE)/peers/bin -peer-errors $(CACHE)/peers/errors.json \
	    -out bench/results/gtp-boots/boot-$$b.json $(BENCH_GTP_FLAGS) || { echo "== bench-gtp: boot $$b failed"; failed=1; }; \
	done; \
	$(BUILD)/bench-gtp -merge -out bench/results/gtp.json bench/results/gtp-boots/boot-*.json && \
	$(GO) run ./bench/plot -in bench/results/gtp.json -out bench/results/gtp.png -unit ms -title 'bench-gtp: UE ping RTT through GTP-U' \
	  -cdf-title 'UE RTT under 10 hogs per vCPU, all boots (CDF)' && exit $$failed
