# proxy-operator. `make dev` and `make test` install what they need (the
# pinned bin/ builds of etcd, kube-apiserver, kubectl and helm, and Debian's squid);
# everything else is `go` from PATH.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# The Python client needs only the standard library; its tests (pytest, and
# the middleware's real Scrapy crawls) and e2e tests use Debian's python3,
# where python3-scrapy and python3-pytest install, whatever python3 is first
# on PATH.
PYTHON ?= /usr/bin/python3

# Everything but the race detector's unit tests builds one way: static (no
# cgo) and -trimpath, as the images must be, so that the dependency graph
# compiles once for the tests, the operator, the auth helper and the images
# (cgo and the paths are part of every package's build cache key).
export CGO_ENABLED ?= 0
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

# Integration/e2e packages each start their own etcd + kube-apiserver (about
# 0.5 GB and most of a core while starting), and mostly wait on them: one
# at a time they kept 2 cores about 27% busy. hack/run-integration.sh
# compiles their test binaries first, INTEGRATION_P at a time, then runs
# INTEGRATION_RUNS of them at once (2: the packages' address pools and ports
# are disjoint; 1 for a quiet machine's timings).
INTEGRATION_P ?= 4
INTEGRATION_RUNS ?= 2
INTEGRATION_PACKAGES ?= ./test/...
INTEGRATION_TIMEOUT ?= 45m
# The test binaries' own flags: -test.run=TestX, -test.v, -test.count=1.
INTEGRATION_FLAGS ?=
# What test-unit tests with the race detector (hack/image is tested without).
UNIT_PACKAGES = ./apis/... ./artifacts/... ./pkg/... ./cmd/... ./examples/... $$($(GO) list ./hack/... | grep -v '/hack/image$$')
# A prefix for the builds `make test` runs beside tests (`nice -n 19`), so
# that they take only the CPU the tests leave.
BUILD_NICE ?=
CRASH_RUNS ?= 20
FAILOVER_KILLS ?= 50
CHECKPOINT_FAULT_POINTS ?= 60

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-17s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## build pinned etcd, kube-apiserver, kube-controller-manager, kubectl, helm into bin/ (~10 min cold, then instant)
	hack/tools/install.sh

.PHONY: squid
squid: ## apt-get install squid if missing (sudo only when not root)
	hack/install-squid.sh

.PHONY: prometheus
prometheus: ## apt-get install prometheus (for promtool) if missing: the alert rules' tests
	hack/install-prometheus.sh

.PHONY: crawlee
crawlee: ## Debian's chromium and Crawlee with playwright-core from npm (the pinned lock, no browser download) into bin/crawlee: test/e2e/crawlee's real clients
	hack/install-crawlee.sh

.PHONY: python
python: ## apt-get install python3-scrapy and python3-pytest if missing (the Python client's tests)
	hack/install-python.sh

.PHONY: generate
generate: ## regenerate deepcopy, CRDs, clients and OpenAPI (committed)
	@for script in $(sort $(wildcard hack/update-codegen*.sh)); do echo "$$script"; "$$script"; done

.PHONY: verify
verify: ## generate must leave no change; gofmt; go vet
	hack/verify.sh

.PHONY: build
build: auth-helper ## build bin/proxy-operator (and bin/proxy-auth-helper)
	$(GO) build -o bin/proxy-operator ./cmd/proxy-operator

.PHONY: auth-helper
auth-helper: ## build bin/proxy-auth-helper, the Squid auth helper every proxy runs (the node agent and the Compute Engine fake run it)
	$(GO) build -o bin/proxy-auth-helper ./cmd/proxy-auth-helper

.PHONY: test
test: tools squid python prometheus image-deps cluster-deps ## everything: integration and e2e beside the real node's e2e (and test-prebuild, at the lowest priority), then unit (installs what they need first)
	$(MAKE) -j3 --output-sync=target BUILD_NICE='nice -n 19' test-integration test-realnode test-prebuild
	$(MAKE) test-unit

# While test-integration's tests wait on their control planes, the cores are
# half idle: `make test` compiles here, at the lowest CPU priority
# (BUILD_NICE), the real node's parts and images and the race detector's
# build of what test-unit tests (go list -export compiles without linking;
# the build cache keeps it).
.PHONY: test-prebuild
test-prebuild: cluster-images
	CGO_ENABLED=1 nice -n 19 $(GO) list -race -test -deps -export -e $(UNIT_PACKAGES) >/dev/null

.PHONY: test-unit
test-unit: tools prometheus python image-deps ## unit tests with the race detector (hack/image without: it compresses whole binaries, 3x slower under -race, and runs the built operator on a control plane), and the Python client's and middleware's (pytest, both Twisted reactors)
	CGO_ENABLED=1 $(GO) test -race -vet=off $(UNIT_PACKAGES)
	$(GO) test -vet=off ./hack/image
	$(PYTHON) -m pytest -p no:cacheprovider -v clients/python

.PHONY: test-integration
test-integration: tools squid python crawlee build ## tests under test/ (INTEGRATION_PACKAGES) against real control planes: test binaries compiled first, then run INTEGRATION_RUNS (2) at a time, against one build of the operator
	PROXY_OPERATOR_BINARY=$(CURDIR)/bin/proxy-operator INTEGRATION_P=$(INTEGRATION_P) INTEGRATION_RUNS=$(INTEGRATION_RUNS) \
		INTEGRATION_TIMEOUT=$(INTEGRATION_TIMEOUT) INTEGRATION_FLAGS='$(INTEGRATION_FLAGS)' hack/run-integration.sh $(INTEGRATION_PACKAGES)

.PHONY: test-realnode
test-realnode: cluster-images ## the README on a real node: brings up make cluster, runs test/e2e/realnode on it, tears it down (needs root)
	$(BUILD_NICE) $(GO) build -o bin/cluster ./hack/cluster
	$(BUILD_NICE) $(GO) test -vet=off -c -o bin/realnode.test ./test/e2e/realnode
	hack/test-realnode.sh

# Built and exec'd (not `go run`) so that make waits for the teardown and a
# SIGTERM sent to make reaches the dev process itself.
.PHONY: dev
dev: tools squid auth-helper ## run the local environment in the foreground until Ctrl-C (writes .dev/)
	$(GO) build -o bin/dev ./hack/dev
	$(GO) build -o bin/proxy-operator ./cmd/proxy-operator
	exec bin/dev -operator-binary bin/proxy-operator $(DEV_ARGS)

IMAGE_VERSION = $$(git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_STAMP = -version "$(IMAGE_VERSION)" -revision "$$(git rev-parse HEAD 2>/dev/null)" -epoch "$$(git log -1 --format=%ct 2>/dev/null || echo 0)"
# Where `make cluster` and test/e2e/realnode find their images: none is pulled.
IMAGE_REGISTRY ?= proxy-operator.local

.PHONY: image
image: image-deps ## OCI image of the operator (linux/amd64, linux/arm64) into bin/image, and this machine's Squid (Debian's package, UID 13) and test toolbox (busybox, curl) images as tarballs in bin/ (no Docker; reproducible from the commit and the packages)
	$(GO) run ./hack/image -out bin/image -tar bin/proxy-operator-image.tar $(IMAGE_STAMP)
	$(GO) run ./hack/image -image squid -tar bin/squid-image.tar -ref $(IMAGE_REGISTRY)/squid:$(IMAGE_VERSION) $(IMAGE_STAMP)
	$(GO) run ./hack/image -image toolbox -tar bin/toolbox-image.tar -ref $(IMAGE_REGISTRY)/toolbox:$(IMAGE_VERSION) $(IMAGE_STAMP)

.PHONY: image-deps
image-deps: squid ## apt-get install what the Squid and toolbox images are made of (squid, busybox-static, curl) if missing
	hack/install-image-deps.sh

# `make cluster`'s images, for this machine's architecture only: the three
# of `make image`, and the node's own (pause, CoreDNS, kube-network-policies).
.PHONY: cluster-images
cluster-images: image-deps cluster-tools
	@mkdir -p bin/cluster-images
	$(BUILD_NICE) $(GO) build -o bin/image ./hack/image
	$(BUILD_NICE) $(GO) build -trimpath -ldflags "-s -w" -o bin/pause ./hack/cluster/pause
	$(BUILD_NICE) bin/image -platforms linux/$$($(GO) env GOARCH) -out bin/cluster-images/operator-layout -tar bin/cluster-images/operator.tar -ref $(IMAGE_REGISTRY)/proxy-operator:$(IMAGE_VERSION) $(IMAGE_STAMP)
	rm -rf bin/cluster-images/operator-layout
	bin/image -image squid -tar bin/cluster-images/squid.tar -ref $(IMAGE_REGISTRY)/squid:$(IMAGE_VERSION) $(IMAGE_STAMP)
	bin/image -image toolbox -tar bin/cluster-images/toolbox.tar -ref $(IMAGE_REGISTRY)/toolbox:$(IMAGE_VERSION) $(IMAGE_STAMP)
	bin/image -image binary -binary bin/pause -tar bin/cluster-images/pause.tar -ref $(IMAGE_REGISTRY)/pause:$(IMAGE_VERSION) $(IMAGE_STAMP)
	bin/image -image binary -binary bin/coredns -user 65532:65532 -tar bin/cluster-images/coredns.tar -ref $(IMAGE_REGISTRY)/coredns:$$(cat bin/.coredns.version) $(IMAGE_STAMP)
	if [ -x bin/kube-network-policies ]; then \
		bin/image -image binary -binary bin/kube-network-policies -tar bin/cluster-images/kube-network-policies.tar -ref $(IMAGE_REGISTRY)/kube-network-policies:$$(cat bin/.kube-network-policies.version) $(IMAGE_STAMP); \
	else rm -f bin/cluster-images/kube-network-policies.tar; fi

.PHONY: cluster-tools
cluster-tools: tools cluster-deps ## build the node's pinned parts into bin/ (kubelet, kube-scheduler, kube-proxy, CoreDNS, and kube-network-policies where nft can queue to user space) and apt-get install containerd, runc and the CNI plugins if missing
	$(BUILD_NICE) hack/tools/install.sh cluster

.PHONY: cluster-deps
cluster-deps: ## apt-get install containerd, runc and the CNI plugins if missing
	hack/install-cluster-deps.sh

# Built and exec'd, as dev is: Ctrl-C (or SIGTERM to make) reaches it, and
# make waits for the teardown.
.PHONY: cluster
cluster: cluster-images ## a one-node cluster (kubelet, containerd, runc, kube-proxy, CoreDNS, kube-network-policies) in the foreground until Ctrl-C; writes .cluster/kubeconfig, .cluster/images, .cluster/ready (needs root)
	$(GO) build -o bin/cluster ./hack/cluster
	exec bin/cluster $(CLUSTER_ARGS)

.PHONY: bench
bench: ## Go benchmarks (speed and memory targets)
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

.PHONY: bench-gateway
bench-gateway: squid ## the gateway against the same Squid: throughput, new-tunnel latency, idle-tunnel memory (docs/benchmarks.md)
	$(GO) test ./test/e2e/gatewaybench -run '^$$' -bench Gateway -benchtime 1x -count 3 -v

.PHONY: bench-sites
bench-sites: squid ## crawler workers against a site that limits its total rate, without and with a SitePolicy (goodput and 429 share), and against one that blocks the cheap tier, with the ladder (docs/sites.md, docs/benchmarks.md)
	$(GO) test ./test/e2e/sitebench -run '^$$' -bench 'SitePolicy|Ladder' -benchtime 1x -count 1 -timeout 30m -v

.PHONY: crash
crash: tools ## kill the operator at CRASH_RUNS (20) random points under faults; print leaked/duplicate/missing per run
	$(GO) test ./test/e2e/crash -run '^$$' -bench CrashRestart -benchtime $(CRASH_RUNS)x -timeout 60m -v

.PHONY: failover
failover: tools ## two replicas, FAILOVER_KILLS (50) random SIGTERM/SIGKILL kill points of the leader under lease load; print double grants
	HISTORY_KILLS=$(FAILOVER_KILLS) $(GO) test ./test/e2e/restart -run '^TestHistoryUnderKills$$' -count=1 -timeout 60m -v

.PHONY: ha
ha: tools squid ## the production overlay on two node agents under lease load, three times: rollout restart, drain of the leader's node, crash of the leader; print the figures (docs/benchmarks.md)
	$(GO) test ./test/e2e/ha -run '^TestHA$$' -count=3 -timeout 40m -v

.PHONY: checkpoint-faults
checkpoint-faults: tools ## the lease checkpoint (3 shards) under CHECKPOINT_FAULT_POINTS (60) kills, transient faults and fenced writers, each followed by a takeover; print double grants, lost leases, stuck writers
	CHECKPOINT_FAULT_POINTS=$(CHECKPOINT_FAULT_POINTS) $(GO) test ./test/integration/checkpoint -run '^TestCheckpointUnderFaults$$' -count=1 -timeout 60m -v

.PHONY: clean
clean: ## remove build outputs and .dev/ (keeps the slow bin/ tool builds)
	rm -rf .dev bin/proxy-operator bin/dev bin/proxy-auth-helper bin/cluster bin/cluster-images
