# SPDX-License-Identifier: Apache-2.0
# A real Kubernetes control plane for tests (internal/kubetest): etcd,
# kube-apiserver, kubectl and helm, built from the Go module proxy by
# lab/k8s.sh. Included by the top Makefile.

# Where lab/k8s.sh puts the binaries (it prints the same path). Known without
# building, so including this file costs nothing: targets that run the
# binaries depend on k8s-bins and pass SWL_K8S_BIN=$(K8S_BIN) (or $(K8S_ENV)).
K8S_BIN := $(CACHE)/k8s/bin
K8S_ENV := SWL_K8S_BIN=$(K8S_BIN)
# Packages whose tests need the control plane (they skip without SWL_K8S_BIN).
K8S_TEST_PKGS ?= ./internal/kubetest/... ./internal/store/crdstore/... ./internal/api/ ./internal/agent/ ./internal/kubeagent/ ./cmd/
# Where the guest's Kubernetes tests write their numbers.
K8S_RESULTS ?= bench/results/k8s.json

.PHONY: k8s-bins
k8s-bins: ## Build etcd, kube-apiserver, kubectl, helm into .cache/k8s/bin (cold ~15 min, then < 1 s)
	@bash lab/k8s.sh >/dev/null

.PHONY: test-k8s
test-k8s: deps k8s-bins vm-bins ## Kubernetes: store, API, agent, chart, CRDs on a real kube-apiserver; agent + cpu.weight in the VM -> bench/results/k8s.json
	$(K8S_ENV) $(GO) test -count=1 $(K8S_TEST_PKGS)
	$(K8S_ENV) $(GO) test -count=1 -tags k8stest ./test/k8s/
	$(GO) build -o $(BUILD)/kubetest-serve ./internal/kubetest/cmd/serve
	@echo '{}' > $(K8S_RESULTS)
	bash mk/k8s-vm.sh $(BUILD) $(K8S_BIN) $(KERNEL) $(K8S_RESULTS) 'TestK8s|TestCgroupWeights'
	@cat $(K8S_RESULTS)

.PHONY: test-k8s-vm
test-k8s-vm: deps k8s-bins ## A lab VM guest (--net) uses the host's kube-apiserver through 10.0.2.2
	$(K8S_ENV) SWL_K8S_VM=1 $(GO) test -count=1 -v -timeout 20m -run TestGuestReachesHostAPIServer ./internal/kubetest/
