# SPDX-License-Identifier: Apache-2.0
# The container image (internal/ociimage): the static binary on an empty
# base, assembled with go-containerregistry, so no Docker engine or base
# image is needed; written as an OCI layout tarball and pushed by the same
# tool. Included by the top Makefile.

# The chart's default image is IMAGE_REPO:<chart appVersion>: an image
# imported under this name needs no --set image.* at `helm install`.
CHART_APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' deploy/helm/swiftlane/Chart.yaml)
IMAGE_REPO ?= ghcr.io/swiftlane/swiftlane
IMAGE      ?= $(IMAGE_REPO):$(CHART_APP_VERSION)
IMAGE_PLATFORMS ?= linux/amd64
IMAGE_TAR  := $(BUILD)/swiftlane-image.tar
# Every timestamp in the image is the last commit's time: the same commit
# (and toolchain) gives the same digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_TOOL := $(GO) run ./internal/ociimage/cmd/image
comma := ,

.PHONY: image
image: ## Container image -> build/swiftlane-image.tar (OCI layout; IMAGE=name:tag, IMAGE_PLATFORMS=linux/amd64,linux/arm64)
	@mkdir -p $(BUILD)/image
	@set -e; bins=; for p in $(subst $(comma), ,$(IMAGE_PLATFORMS)); do \
	  os=$${p%%/*}; arch=$${p#*/}; out=$(BUILD)/image/$$os-$$arch/swiftlane; \
	  echo "go build $$p -> $$out"; \
	  GOOS=$$os GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) -o $$out .; \
	  bins="$$bins -binary $$p=$$out"; \
	done; \
	$(IMAGE_TOOL) build -out $(IMAGE_TAR) -name $(IMAGE) -version $(VERSION) -source-date-epoch $(SOURCE_DATE_EPOCH) $$bins

.PHONY: image-push
image-push: image ## Push the image to IMAGE (e.g. IMAGE=registry.example/swiftlane:v0.1.0; credentials of docker/crane login)
	$(IMAGE_TOOL) push -in $(IMAGE_TAR) $(IMAGE)
