# SPDX-License-Identifier: Apache-2.0
# Service load balancer (internal/lb): tests and benchmark. Included by the
# top Makefile. Both targets need root: they load BPF and build network
# namespaces (everything they create stays inside those namespaces).

LB_BENCH_FLAGS ?=

.PHONY: test-lb
test-lb: ## LB: Go unit + BPF_PROG_TEST_RUN + netns end-to-end tests (root; fails instead of skipping)
	bash mk/lb-deps.sh
	SWIFTLANE_REQUIRE_NETNS=1 $(GO) test -count=1 -p 1 -timeout 4m ./internal/lb/... ./bench/lb/...

.PHONY: bench-lb
bench-lb: ## LB: iptables vs nftables vs swiftlane in netns -> bench/results/lb.json (root, ~1 min)
	bash mk/lb-deps.sh
	@mkdir -p bench/results
	$(GO) run ./bench/lb -out bench/results/lb.json $(LB_BENCH_FLAGS)
