# SPDX-License-Identifier: Apache-2.0
# make test-conformance: Kubernetes' own sig-network conformance tests
# (the upstream e2e.test, same release as the cluster) on the cluster lab's
# one node (mk/cluster.mk), as a platform team would check a kube-proxy
# replacement. test/vm/conformance_test.go runs e2e.test in the guest once
# per pass; test/conformance turns each pass's JUnit report into a column of
# CONFORMANCE_RESULTS. Not part of make test (it takes the VM for long).
# Included by the top Makefile.

CONFORMANCE_RESULTS ?= bench/results/conformance.json
CONFORMANCE_DIR     := $(BUILD)/conformance
# e2e.test's images, built once per release (mk/conformance-images.sh).
CONFORMANCE_CACHE   := $(CACHE)/conformance
# The host's loopback port QEMU forwards to the guest's egress proxy, the
# API server's way to the kubelet (exec) and to pods (proxy). It dials the
# kubelet at the node's InternalIP: no name of the node resolves there.
CONFORMANCE_EGRESS_PORT ?= 18131
# A subset, a regular expression without spaces (the guest's environment
# is split on them; \s stands for one), e.g. 'Services.*NodePort': its tests'
# results replace theirs in CONFORMANCE_RESULTS, the others' stay.
CONFORMANCE_FOCUS ?=
# The passes to run (each up to 4 h, e2e.test's own limit; the VM's and the
# guest test's limits cover two), comma-separated, in this order on the same node:
# kube_proxy (the node's kube-proxy, iptables mode), then swiftlane
# (kube-proxy stopped and cleaned up, the chart's load balancer installed in
# its place). One alone merges its column into CONFORMANCE_RESULTS.
CONFORMANCE_COLUMNS ?= kube_proxy,swiftlane
E2E_PAUSE_TAR := $(BUILD)/e2e-pause-image.tar
# The kube-dns Service's IP (CoreDNS): the tenth of kubetest's 10.96.0.0/12,
# as kubeadm picks it.
CONFORMANCE_DNS := 10.96.0.10

.PHONY: conformance-bins
conformance-bins: cluster-bins ## Build e2e.test + agnhost at the cluster's release and the images its tests run into .cache/ (cold ~30 min, then < 1 s)
	@bash lab/k8s.sh --cluster --e2e >/dev/null
	@bash mk/conformance-images.sh $(K8S_BIN) $(CONFORMANCE_CACHE) >/dev/null

.PHONY: test-conformance
test-conformance: deps conformance-bins image vm-bins ## Upstream sig-network conformance tests on the one-node cluster lab, with kube-proxy and then with the chart's swiftlane lb in its place -> bench/results/conformance.json (~1-2 h per pass under TCG)
	@set -e; . $(CONFORMANCE_CACHE)/images.env; \
	for p in "$(PAUSE_IMAGE) $(PAUSE_TAR)" "$$PAUSE_IMAGE $(E2E_PAUSE_TAR)"; do set -- $$p; \
	  $(IMAGE_TOOL) build -out $$2 -name $$1 -args "lab pause" -version $(VERSION) \
	    -source-date-epoch $(SOURCE_DATE_EPOCH) -binary linux/amd64=$(BUILD)/image/linux-amd64/swiftlane; \
	done
	$(GO) build -o $(BUILD)/kubetest-serve ./internal/kubetest/cmd/serve
	rm -rf $(CONFORMANCE_DIR) && mkdir -p $(CONFORMANCE_DIR)
	@echo '{}' > $(CONFORMANCE_DIR)/k8s.json
	@status=0; . $(CONFORMANCE_CACHE)/images.env; \
	K8S_CONTROLLERS=1 K8S_APPLY_CRDS=0 K8S_TEST_TIMEOUT=8h \
	K8S_APISERVER_ARGS="--advertise-address=10.0.2.2 --endpoint-reconciler-type=lease --kubelet-preferred-address-types=InternalIP" \
	K8S_SERVE_ARGS="-egress-forward 127.0.0.1:$(CONFORMANCE_EGRESS_PORT)" \
	K8S_VM_ARGS="--memory 4G --timeout 29500 --hostfwd $(CONFORMANCE_EGRESS_PORT):8131" \
	K8S_GUEST_ENV="SWL_K8S_BIN=$(K8S_BIN) SWL_REQUIRE_CLUSTER=1 SWL_REQUIRE_CONFORMANCE=1 \
	  SWL_CLUSTER_IMAGES=$(IMAGE_TAR),$(PAUSE_TAR),$(E2E_PAUSE_TAR),$(CONFORMANCE_CACHE)/agnhost.tar,$(CONFORMANCE_CACHE)/busybox.tar,$(CONFORMANCE_CACHE)/glibc-dns-testing.tar,$(CONFORMANCE_CACHE)/coredns.tar \
	  SWL_CLUSTER_DNS=$(CONFORMANCE_DNS) SWL_CONFORMANCE_COREDNS_IMAGE=$$COREDNS_IMAGE \
	  SWL_CLUSTER_IMAGE=$(IMAGE) SWL_CLUSTER_PAUSE=$(PAUSE_IMAGE) SWL_CLUSTER_LOGS=$(CONFORMANCE_DIR)/node-logs \
	  SWL_CONFORMANCE_E2E=$(K8S_BIN)/e2e.test SWL_CONFORMANCE_DIR=$(CONFORMANCE_DIR) SWL_CONFORMANCE_EGRESS=:8131 \
	  SWL_CONFORMANCE_FOCUS=$(CONFORMANCE_FOCUS) SWL_CONFORMANCE_COLUMNS=$(CONFORMANCE_COLUMNS)" \
	  bash mk/k8s-vm.sh $(BUILD) $(K8S_BIN) $(CLUSTER_KERNEL) $(CONFORMANCE_DIR)/k8s.json '^TestConformance$$' || status=$$?; \
	for col in kube_proxy swiftlane; do \
	  [ -f $(CONFORMANCE_DIR)/$$col/junit_01.xml ] || continue; \
	  $(GO) run ./test/conformance/cmd/report -junit $(CONFORMANCE_DIR)/$$col/junit_01.xml -column $$col \
	    -release $$K8S_RELEASE -focus '$(CONFORMANCE_FOCUS)' -out $(CONFORMANCE_RESULTS) || status=1; \
	done; \
	exit $$status
