# SPDX-License-Identifier: Apache-2.0
# The 5G user-plane lab (docs/gtp.md). Included by the top Makefile; the VM
# tests of automatic mode (test/vm/gtp_test.go) run with `make test-vm`.

.PHONY: lab-gtp
lab-gtp: deps vm-bins ## 5G user-plane lab in the VM: kernel gtp UPF, our gNB, UE pings traced by swiftlane
	$(VM) --kernel $(KERNEL) -- env SWIFTLANE_BIN=$(BUILD)/swiftlane $(VMTEST) -test.v -test.run 'TestGTP' -test.timeout 10m
