# SPDX-License-Identifier: Apache-2.0
# The 5G user-plane lab (docs/gtp.md). Included by the top Makefile; the VM
# tests of automatic mode (test/vm/gtp_test.go) run with `make test-vm`.

.PHONY: lab-gtp
lab-gtp: deps vm-bins ## 5G user-plane lab in the VM: kernel gtp UPF, our gNB, UE pings traced by swiftlane
	$(VM) --kernel $(KERNEL) -- env SWIFTLANE_BIN=$(BUILD)/swiftlane $(VMTEST) -test.v -test.run 'TestGTP' -test.timeout 10m

.PHONY: bench-gtp
bench-gtp: deps vm-bins peers ## UE ping RTT through GTP-U, all variants + gNB restarts in one boot -> bench/results/gtp.json + .png
	$(GO) build -o $(BUILD)/bench-gtp ./bench/gtp
	$(VM) --kernel $(KERNEL) -- $(BUILD)/bench-gtp -swiftlane $(BUILD)/swiftlane -out bench/results/gtp.json
	$(GO) run ./bench/plot -in bench/results/gtp.json -out bench/results/gtp.png -unit ms -title 'UE ping RTT through GTP-U'
