# drasched — build, test and benchmark entry points. `make help` lists them.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# Tools are pinned in hack/tools/go.mod and run with `go tool`; nothing is
# installed from a moving version query.
GO_TOOL := $(GO) tool -modfile=hack/tools/go.mod
# Helm (helm.sh/helm/v3) has a module of its own, hack/helm, so that its
# Kubernetes libraries do not move the versions of hack/tools.
HELM_TOOL := $(GO) tool -modfile=hack/helm/go.mod helm

OUTPUT_DIR ?= _output

# The Kubernetes minor to build and test for (docs/compatibility.md):
# `make build KUBE_MINOR=1.36`. Empty, or go.mod's minor: the newest. An
# older minor builds with its module file hack/minor/MINOR/go.mod and its
# build tag, into folders of its own, and its scheduler image says so in
# its tag; hack/lib/minor.sh does the same for the scripts.
KUBE_MINOR ?=
NEWEST_MINOR := $(shell sed -n 's/^[[:space:]]*k8s.io\/kubernetes v1\.\([0-9]*\)\..*$$/1.\1/p' go.mod | head -n1)
MINOR := $(or $(KUBE_MINOR),$(NEWEST_MINOR))
ifneq ($(MINOR),$(NEWEST_MINOR))
MODFILE_FLAG := -modfile=hack/minor/$(MINOR)/go.mod
MINOR_FLAGS := $(MODFILE_FLAG) -tags=kube$(MINOR)
MINOR_DIR := /$(MINOR)
endif
export KUBE_MINOR

BIN_DIR := $(OUTPUT_DIR)$(MINOR_DIR)/bin
# Control-plane binaries for the demo, e2e tests and benchmarks (hack/build-control-plane.sh).
CLUSTER_BIN_DIR := $(OUTPUT_DIR)/cluster$(MINOR_DIR)/bin

# drasched's release version is the chart's appVersion
# (charts/drasched/Chart.yaml): the binaries report it, `make images` tags the
# images with it, and config/ and the chart deploy those tags
# (hack/images/refs_test.go checks). For a development build, name the
# commit: `make images VERSION=$$(git describe --tags --always --dirty)`.
VERSION ?= $(shell sed -n 's/^appVersion: *//p' charts/drasched/Chart.yaml)
GIT_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/drasched/drasched/pkg/version
# kube-scheduler logs and serves (/version, --version) the version of
# k8s.io/component-base: stamp it with the Kubernetes release we build on.
K8S_VERSION := $(shell $(GO) list $(MODFILE_FLAG) -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null)
K8S_VERSION_PKG := k8s.io/component-base/version
K8S_VERSION_PARTS := $(subst ., ,$(patsubst v%,%,$(K8S_VERSION)))
LDFLAGS := -X $(VERSION_PKG).gitVersion=$(VERSION) -X $(VERSION_PKG).gitCommit=$(GIT_COMMIT) -X $(VERSION_PKG).buildDate=$(BUILD_DATE) \
	-X $(K8S_VERSION_PKG).gitVersion=$(K8S_VERSION) -X $(K8S_VERSION_PKG).gitTreeState=clean -X $(K8S_VERSION_PKG).buildDate=$(BUILD_DATE) \
	-X $(K8S_VERSION_PKG).gitMajor=$(word 1,$(K8S_VERSION_PARTS)) -X $(K8S_VERSION_PKG).gitMinor=$(word 2,$(K8S_VERSION_PARTS))

# Binaries under cmd/ that have a main package.
COMMANDS := $(patsubst cmd/%/,%,$(dir $(wildcard cmd/*/main.go)))

# Allocator benchmark knobs: `make bench-allocator BENCHTIME=2s COUNT=5`.
BENCHTIME ?= 1s
COUNT ?= 3
# `make bench QUICK=1`: the quick subset, under 10 minutes on 2 cores.
QUICK ?=

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-24s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The demo's binaries carry the commit's date instead of the time of the
# build, so that a second `make demo` finds them up to date instead of
# linking them again. It builds only the binaries: `go build ./...` alone
# takes half a minute to find everything up to date on 2 cores.
SOURCE_DATE := $(shell TZ=UTC0 git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null)

# `make demo HELM=1`: the Helm chart's demo instead (demo/helm.sh).
HELM ?=
# `make demo REAL_NODE=1` (root): a real node next to the kwok nodes, with a
# GPU pod running as a container (demo/demo.sh, docs/real-node.md).
REAL_NODE ?=
DEMO_SCRIPT := $(if $(filter 1,$(HELM)),demo/helm.sh,demo/demo.sh)
DEMO_DIR := $(OUTPUT_DIR)$(MINOR_DIR)/$(if $(filter 1,$(HELM)),demo-helm,demo)

.PHONY: demo
demo: build-control-plane ## Run the main job: local control plane, kwok GPU nodes, drasched scheduling GPU pods (KEEP=1 leaves it up; HELM=1: install the Helm chart and use it; REAL_NODE=1: add a real node, as root; KUEUE=1: two teams' Jobs under Kueue).
	@echo "==> drasched binaries in $(BIN_DIR) (a few minutes when the Go build cache is cold)"
	@$(MAKE) --no-print-directory commands BUILD_DATE=$(or $(SOURCE_DATE),$(BUILD_DATE))
	$(if $(filter 1,$(REAL_NODE)),hack/build-node.sh)
	$(if $(filter 1,$(KUEUE)),@$(MAKE) --no-print-directory kueue)
	BIN_DIR=$(BIN_DIR) CLUSTER_BIN_DIR=$(CLUSTER_BIN_DIR) DEMO_DIR=$(DEMO_DIR) REAL_NODE=$(REAL_NODE) KUEUE=$(KUEUE) $(DEMO_SCRIPT)

# Images: static binaries (CGO_ENABLED=0) on an empty base, built by
# hack/images (go-containerregistry, pinned in hack/images/go.mod) without a
# container engine or a registry. The images, their files and the binaries
# in them carry the commit's time, so the same commit gives the same image
# digest; the tarballs are in `docker save` format.
# The scheduler is kube-scheduler of one Kubernetes minor: its image's tag
# names the minor (v0.1.0-k8s1.37). The GPU driver's image is one for every
# cluster, built from the newest minor (docs/compatibility.md), so an older
# KUBE_MINOR builds only the scheduler's.
IMAGES := scheduler $(if $(MINOR_DIR),,gpu-kubelet-plugin)
image_tag = $(if $(filter scheduler,$(1)),$(VERSION)-k8s$(MINOR),$(VERSION))
# Images that run dynamically linked programs get a layer with the GNU C
# library, from Debian's libc6 pinned in hack/images/libc6.sha256
# (hack/libc6.sh downloads it once with apt-get): the GPU plugin runs
# nvidia-smi, which the NVIDIA runtime mounts from the host without it.
IMAGES_WITH_LIBC := gpu-kubelet-plugin
IMAGE_REPOSITORY ?= ghcr.io/drasched
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
IMAGE_DIR := $(OUTPUT_DIR)/images
IMAGE_BIN_DIR := $(IMAGE_DIR)/bin$(MINOR_DIR)/linux_$(IMAGE_ARCH)
IMAGE_SOURCE := https://github.com/drasched/drasched
IMAGE_CREATED = $(or $(SOURCE_DATE),1970-01-01T00:00:00Z)
IMAGE_REVISION = $(shell git rev-parse HEAD 2>/dev/null)

.PHONY: images
images: ## Build the image tarballs $(IMAGE_DIR)/<name>-<tag>.tar without a container engine (VERSION=, IMAGE_ARCH=, IMAGE_REPOSITORY=; KUBE_MINOR= for the scheduler of an older minor).
	@$(MAKE) --no-print-directory image-binaries BUILD_DATE=$(IMAGE_CREATED)
	$(GO) build -C hack/images -o $(CURDIR)/$(IMAGE_DIR)/bin/images .
	@for img in $(IMAGES); do \
		libc=(); \
		if [[ " $(IMAGES_WITH_LIBC) " == *" $$img "* ]]; then \
			tar=$$(hack/libc6.sh $(IMAGE_ARCH) $(IMAGE_DIR)/libc6); \
			libc=(--libc=$$tar --libc-package=$$(basename $$tar .tar)); \
		fi; \
		tag=$(VERSION); if [[ $$img == scheduler ]]; then tag=$(call image_tag,scheduler); fi; \
		$(IMAGE_DIR)/bin/images --name=$$img --binary=$(IMAGE_BIN_DIR)/$$img "$${libc[@]}" \
			--repository=$(IMAGE_REPOSITORY) --version=$$tag --revision=$(IMAGE_REVISION) \
			--source=$(IMAGE_SOURCE) --arch=$(IMAGE_ARCH) --created=$(IMAGE_CREATED) \
			--output=$(IMAGE_DIR)/$$img-$$tag.tar; \
	done

.PHONY: image-binaries
image-binaries:
	@mkdir -p $(IMAGE_BIN_DIR)
	@for img in $(IMAGES); do \
		echo "CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build $(MINOR_FLAGS) -trimpath -o $(IMAGE_BIN_DIR)/$$img ./cmd/$$img"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build $(MINOR_FLAGS) -trimpath -ldflags "-s -w $(LDFLAGS)" \
			-o $(IMAGE_BIN_DIR)/$$img ./cmd/$$img; \
	done

.PHONY: image-refs
image-refs: ## Print the images that `make images` builds: <repository>/<name>:<tag>.
	@echo $(foreach img,$(IMAGES),$(IMAGE_REPOSITORY)/$(img):$(call image_tag,$(img)))

.PHONY: demo-down
demo-down: ## Tear down the cluster that KEEP=1 make demo left up (HELM=1: that of make demo HELM=1).
	BIN_DIR=$(BIN_DIR) CLUSTER_BIN_DIR=$(CLUSTER_BIN_DIR) DEMO_DIR=$(DEMO_DIR) $(DEMO_SCRIPT) down

.PHONY: build-control-plane
build-control-plane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, kwokctl (rebuilt when versions change).
	CLUSTER_BIN_DIR=$(CLUSTER_BIN_DIR) hack/build-control-plane.sh

# The packages an older minor builds: all but the benchmarks, which compare
# the newest with upstream.
MINOR_PACKAGES := ./apis/... ./cmd/... ./internal/... ./pkg/... ./demo/... ./test/...

.PHONY: build
build: commands ## Build all packages and the binaries under cmd/ into $(BIN_DIR) (KUBE_MINOR=1.36: for that minor, into _output/1.36/bin).
	$(GO) build $(MINOR_FLAGS) $(if $(MINOR_DIR),$(MINOR_PACKAGES),./...)

.PHONY: commands
commands: ## Build only the binaries under cmd/ into $(BIN_DIR).
	@mkdir -p $(BIN_DIR)
	@for cmd in $(COMMANDS); do \
		echo "go build $(strip $(MINOR_FLAGS) -o) $(BIN_DIR)/$$cmd ./cmd/$$cmd"; \
		$(GO) build $(MINOR_FLAGS) -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/$$cmd ./cmd/$$cmd; \
	done

.PHONY: test
test: kueue ## Run all tests: unit, differential, integration, Kueue, fault injection, race, upstream conformance and the real node (needs root).
	$(GO) test ./...
	cd bench/cmd/report && $(GO) test ./...
	$(MAKE) test-images
	$(MAKE) test-chart
	$(MAKE) test-faults
	$(MAKE) test-race
	$(MAKE) conformance
	$(MAKE) test-compat-gate
	$(MAKE) test-node

.PHONY: test-images
test-images: ## Test the image builder (hack/images) and that config/ deploys the images `make images` builds.
	cd hack/images && $(GO) test -count=1 ./...

# helm template needs a Kubernetes version: Helm's default (1.20) is older
# than the chart's kubeVersion.
CHART := charts/drasched
CHART_KUBE_VERSION := $(K8S_VERSION)

.PHONY: test-chart
test-chart: ## Lint and render the Helm chart, and check that it renders what config/ holds (hack/helm).
	$(HELM_TOOL) lint --strict --kube-version $(CHART_KUBE_VERSION) $(CHART)
	$(HELM_TOOL) template drasched $(CHART) --namespace drasched-system --kube-version $(CHART_KUBE_VERSION) >/dev/null
	$(HELM_TOOL) template drasched $(CHART) --namespace drasched-system --kube-version $(CHART_KUBE_VERSION) \
		--set namespace.create=true --set scheduler.featureGates.GenericWorkload=true --set gpuDriver.backend=sysfs >/dev/null
	cd hack/helm && $(GO) test -count=1 ./...

# The real node needs root: its kubelet, containerd and runc run on this
# host (docs/real-node.md). hack/test-node.sh takes it down again and
# checks that the host is as it was.
.PHONY: test-node
# `make test-node KUBELET_MINOR=1.35`: the node's kubelet of an older minor
# (kubelets may be older than the API server; docs/compatibility.md).
KUBELET_MINOR ?=
NODE_BIN_DIR := $(OUTPUT_DIR)/node$(if $(filter-out $(NEWEST_MINOR),$(KUBELET_MINOR)),/$(KUBELET_MINOR))/bin

test-node: build-control-plane images ## Run GPU workloads as containers on a real node (kubelet, containerd, runc; the chart installs our images); needs root (KUBELET_MINOR=1.35: an older kubelet).
	KUBELET_MINOR=$(KUBELET_MINOR) NODE_BIN_DIR=$(NODE_BIN_DIR) hack/build-node.sh
	NODE_BIN_DIR=$(NODE_BIN_DIR) IMAGE_TARBALLS="$(foreach img,$(IMAGES),$(IMAGE_DIR)/$(img)-$(call image_tag,$(img)).tar)" hack/test-node.sh

# test/kueue runs Kueue's manager and renders Kueue's chart with these; built
# here so that a cold build does not count against that package's test
# timeout.
.PHONY: kueue
kueue: ## Build Kueue's manager (pinned in hack/kueue/go.mod; go tool caches it) and the pinned Helm, for test/kueue and make demo KUEUE=1.
	$(GO) tool -modfile=hack/kueue/go.mod -n kueue
	$(HELM_TOOL) version --short

.PHONY: test-kueue
test-kueue: kueue ## Run drasched under Kueue: quota for DRA devices, borrowing, Kueue's preemption, drasched's placement (test/kueue).
	$(GO) test -count=1 ./test/kueue/...

.PHONY: test-integration
test-integration: ## Run the integration tests: in-process kube-apiserver, etcd, claim controller and scheduler.
	$(GO) test -count=1 ./test/integration/...

# The fault scenarios are behind the build tag "faults" so that `go test ./...`
# does not run them beside test/integration: both start an apiserver, and the
# scenarios' leases and delays are timed for a machine that is not busy with
# another suite.
.PHONY: test-faults
test-faults: ## Run the fault-injection scenarios: lost write answers, late watches, leader handover, apiserver restart, scheduler killed.
	$(GO) test -count=1 -tags faults -timeout 20m ./test/faults/...

.PHONY: test-race
test-race: ## Run the tests of concurrent code paths with the race detector.
	$(GO) test -race -run 'TestConcurrentNodes|TestCacheReuse|TestExplain|TestReadMostlyMap' ./pkg/allocator
	$(GO) test -race ./pkg/tracker/... ./pkg/plugins/dra ./pkg/plugins/drapreemption ./pkg/leaderfence

.PHONY: conformance
conformance: ## Run upstream's allocator suite against pkg/allocator (UPSTREAM=1 adds upstream's variants) and upstream's DRA integration suite against StructuredDRA.
	hack/conformance.sh
	hack/conformance-integration.sh

# `make conformance-integration ENTRIES=default RUN='TestDRA/default/FilterTimeout'`
ENTRIES ?= default all
RUN ?=

.PHONY: test-compat
test-compat: ## Test the builds for the older Kubernetes minors (hack/minor/*): our unit and integration tests and upstream's allocator and DRA integration suites of each minor (MINORS="1.36" for some).
	hack/test-compat.sh $(MINORS)

.PHONY: test-compat-gate
test-compat-gate: ## What make test runs of test-compat, within CI's budget: upstream's DRA integration suite with its entry point default only.
	hack/test-compat.sh --gate $(MINORS)

.PHONY: test-compat-differential
test-compat-differential: ## Run the differential corpus against an older minor's upstream allocator (KUBE_MINOR=1.36); not yet green, see docs/compatibility.md.
	$(GO) test $(MINOR_FLAGS) -count=1 -run 'TestDifferential|FuzzDifferential' ./pkg/allocator/

.PHONY: conformance-integration
conformance-integration: ## Run only upstream's DRA integration suite with StructuredDRA for DynamicResources (ENTRIES="default all", RUN=regexp).
	ENTRIES="$(ENTRIES)" hack/conformance-integration.sh $(if $(RUN),-test.run '$(RUN)')

.PHONY: bench
bench: ## Run scheduler_perf, kwok and allocator benchmarks, drasched and upstream side by side; results in bench/results/next, resumed case by case on the same commit, replacing bench/results once the whole plan is measured (QUICK=1: quick subset; SUITES="scheduler_perf allocator kwok").
	QUICK=$(QUICK) hack/bench.sh

.PHONY: bench-report
bench-report: ## Make bench/results (latest.json, latest.md, plots) and docs/benchmarks.md's results again from bench/results/store, measuring nothing: after a change to the report.
	cd bench/cmd/report && $(GO) run . merge -out $(CURDIR)/bench/results -store $(CURDIR)/bench/results/store -doc $(CURDIR)/docs/benchmarks.md

.PHONY: bench-scheduler-perf
bench-scheduler-perf: ## Run upstream's scheduler_perf DRA workloads with DynamicResources and with StructuredDRA (CASES=regexp RUNS=n).
	hack/bench-scheduler-perf.sh

.PHONY: bench-kwok
bench-kwok: ## Run the kwok end-to-end benchmark: upstream, drasched (each also with SchedulerPreQueueingHints, +pqh) and (fragmentation cases) drasched BestFit, each on a fresh kwok cluster (PLAN="N:cases ..." NODES="n ..." QUICK=1 RUNS=n FILL_PODS=n CHURN_RATE=p CASES=a,b SCHEDULERS="a b").
	QUICK=$(QUICK) hack/bench-kwok.sh

.PHONY: bench-allocator
bench-allocator: ## Benchmark pkg/allocator against upstream's allocator on the same inputs, and kubectl drasched top and fit (pkg/capacity) against their time targets.
	hack/bench-allocator.sh -benchtime=$(BENCHTIME) -count=$(COUNT)

.PHONY: etcd
etcd: ## Build etcd (pinned) into $(BIN_DIR) for scheduler_perf and integration tests.
	hack/build-etcd.sh $(BIN_DIR)

# The Go modules of this repository, each with its own go.mod and go.sum
# (make tidy and verify-mod list them in their help too).
MODULES := . hack/tools hack/helm hack/images hack/kueue bench/cmd/report

.PHONY: verify
verify: verify-fmt verify-mod shellcheck verify-codegen verify-deps vet lint logcheck ## Run all static checks, as CI does before make test: formatting and import groups, go mod tidy, shellcheck, generated files, the layers (kubectl-drasched links no kube-scheduler), go vet, golangci-lint (depguard holds the layers per file), logcheck.

.PHONY: fmt
fmt: ## Format the Go files of all modules: gofmt, and imports in groups (standard library, other modules, github.com/drasched/drasched; .golangci.yml).
	$(GO_TOOL) golangci-lint fmt ./...

.PHONY: verify-fmt
verify-fmt: ## Fail if make fmt would change a Go file (prints the diff).
	$(GO_TOOL) golangci-lint fmt --diff ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...
	$(GO) vet -tags schedulerperf ./bench/schedulerperf
	$(GO) vet -tags faults ./test/faults/...
	$(GO) vet -tags node ./test/node/...
	cd bench/cmd/report && $(GO) vet ./...
	cd hack/images && $(GO) vet ./...
	cd hack/helm && $(GO) vet ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned in hack/tools/go.mod).
	$(GO_TOOL) golangci-lint run ./...
	cd bench/cmd/report && $(GO) tool -modfile=../../../hack/tools/go.mod golangci-lint run ./...
	cd hack/images && $(GO) tool -modfile=../tools/go.mod golangci-lint run ./...
	cd hack/helm && $(GO) tool -modfile=../tools/go.mod golangci-lint run ./...

# go mod tidy reads the files of every build tag, and those of an older
# Kubernetes minor import packages that the newest minor's modules lack
# (k8s.io/api/scheduling/v1alpha2): -e passes over them, and the messages
# about them are left out. `make build` compiles the newest minor and `make
# test-compat` the others.
TIDY := $(GO) mod tidy -e
TIDY_QUIET := 2> >(grep -v -e 'finding module for package' -e 'does not contain package' -e ' imports$$' >&2)

.PHONY: tidy
tidy: ## Run go mod tidy in every module: the root, hack/tools, hack/helm, hack/images, hack/kueue, bench/cmd/report.
	@for m in $(MODULES); do echo "go mod tidy ($$m)"; (cd $$m && $(TIDY) $(TIDY_QUIET)) || exit 1; done

.PHONY: verify-mod
verify-mod: ## Fail if go.mod or go.sum of a module is not tidy (go mod tidy -diff in each module of make tidy).
	@rc=0; for m in $(MODULES); do \
		echo "go mod tidy -diff ($$m)"; \
		(cd $$m && $(TIDY) -diff $(TIDY_QUIET)) || { echo "$$m: go.mod or go.sum is not tidy: run make tidy" >&2; rc=1; }; \
	done; exit $$rc

# logcheck type-checks the root module only: the other modules do not log
# through klog. The build tags are golangci-lint's (.golangci.yml).
.PHONY: logcheck
logcheck: ## Check that the code logs contextually: a logger from the context or a parameter, no global klog calls (sigs.k8s.io/logtools' logcheck, pinned in hack/tools/go.mod; exceptions in hack/logcheck.conf).
	GOFLAGS="$${GOFLAGS:-} -tags=schedulerperf,faults,node" $(GO_TOOL) logcheck \
		-check-contextual -check-with-helpers -check-logger-constructor -config hack/logcheck.conf ./...

.PHONY: verify-deps
verify-deps: ## Fail if kubectl-drasched links a kube-scheduler package (go list -deps; hack/verify-deps.sh).
	hack/verify-deps.sh

.PHONY: shellcheck
shellcheck: ## Run shellcheck over every shell script (Debian's shellcheck; hack/verify-shellcheck.sh).
	hack/verify-shellcheck.sh

.PHONY: update-codegen
update-codegen: ## Regenerate deepcopy/conversion/defaults of apis/config and config/scheduler/configmap.yaml.
	hack/update-codegen.sh

.PHONY: verify-codegen
verify-codegen: ## Fail if generated files are stale (the tree is not touched).
	hack/verify-codegen.sh

.PHONY: bump-kubernetes
bump-kubernetes: ## Move to another Kubernetes release (KUBE_VERSION=v1.37.x): k8s.io/kubernetes, the staging replace block, the code generators.
	hack/bump-kubernetes.sh $(KUBE_VERSION)

.PHONY: bump-kubernetes-minor
bump-kubernetes-minor: ## Regenerate an older minor's module file hack/minor/MINOR/go.mod (KUBE_VERSION=v1.36.x).
	hack/bump-kubernetes.sh --minor $(KUBE_VERSION)

.PHONY: clean
clean: ## Remove build outputs.
	rm -rf $(OUTPUT_DIR)
