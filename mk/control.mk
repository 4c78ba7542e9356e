# SPDX-License-Identifier: Apache-2.0
# Control plane (internal/api, internal/agent, internal/store, internal/auth,
# internal/ui): the Chromium UI test and the benchmark. Its Go tests (real
# servers on loopback) run in `make test-unit`; the UI test there skips when
# Chromium is missing, test-ui installs it and requires it.

CONTROL_BENCH_FLAGS ?=

.PHONY: test-ui
test-ui: ## Control plane: web UI in headless Chromium against a real server (installs chromium; screenshots in bench/results/ui/)
	bash mk/control-deps.sh
	SWIFTLANE_REQUIRE_CHROMIUM=1 SWIFTLANE_UI_SCREENSHOTS=$(CURDIR)/bench/results/ui \
	  $(GO) test -count=1 -timeout 3m -run TestUIInChromium -v ./internal/ui/

.PHONY: bench-control
bench-control: ## Control plane: propagation p50/p99 and fan-out to 500 agents -> bench/results/control.json (~1 min)
	@mkdir -p bench/results
	$(GO) run ./bench/control -out bench/results/control.json $(CONTROL_BENCH_FLAGS)

# schemathesis from PyPI in a venv of its own under .cache (pinned; the
# target installs it). SCHEMATHESIS_FLAGS bound the run: a few minutes.
SCHEMATHESIS_VERSION ?= 4.32.5
SCHEMATHESIS_VENV    := $(CACHE)/schemathesis-$(SCHEMATHESIS_VERSION)
SCHEMATHESIS_FLAGS   ?= --max-examples 50 --seed 1 --max-time 180 --workers 1 --request-timeout 3 --no-shrink

.PHONY: test-api-schema
test-api-schema: ## Control plane: schemathesis (all checks) against a real `swiftlane api`, two phases (revoke apart), ~3.5 min (installs schemathesis into .cache)
	bash mk/schemathesis-deps.sh $(SCHEMATHESIS_VENV) $(SCHEMATHESIS_VERSION)
	@mkdir -p $(BUILD)
	$(GO) build -o $(BUILD)/swiftlane-schema-test .
	bash mk/schemathesis.sh $(BUILD)/swiftlane-schema-test $(SCHEMATHESIS_VENV)/bin/st $(SCHEMATHESIS_FLAGS)
