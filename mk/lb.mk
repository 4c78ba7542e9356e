# SPDX-License-Identifier: Apache-2.0
# Service load balancer (internal/lb): tests and benchmark. Included by the
# top Makefile. Both targets need root: they load BPF and build network
# namespaces (everything they create stays inside those namespaces).

LB_BENCH_FLAGS ?=

# internal/lb/kubesource runs a real kube-apiserver (internal/kubetest), hence
# k8s-bins and $(K8S_ENV) (mk/k8s.mk); without SWL_K8S_BIN those tests skip.
.PHONY: test-lb
test-lb: k8s-bins ## LB: Go unit + BPF_PROG_TEST_RUN + netns end-to-end + Kubernetes source tests (root; fails instead of skipping)
	bash mk/lb-deps.sh
	$(K8S_ENV) SWIFTLANE_REQUIRE_NETNS=1 $(GO) test -count=1 -p 1 -timeout 6m ./internal/lb/... ./bench/lb/...

.PHONY: bench-lb
bench-lb: ## LB: iptables vs nftables vs swiftlane in netns -> bench/results/lb.json (root, ~1 min)
	bash mk/lb-deps.sh
	@mkdir -p bench/results
	$(GO) run ./bench/lb -out bench/results/lb.json $(LB_BENCH_FLAGS)
