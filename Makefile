# etcd-operator. The two commands a newcomer needs:
#   make sandbox   run the operator on a local Kubernetes (real kubelets, no container engine)
#   make test      everything CI checks
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# testtimes records each tier's test events (make test, and a tier run
# alone); defined before any rule names it as a prerequisite.
TESTTIMES := bin/testtimes
TEST_TIMES := $(CURDIR)/bin/test-times
RECORD := $(CURDIR)/$(TESTTIMES) record -dir $(TEST_TIMES)
# Every build and test of the project is static and shares one build
# configuration, so a package compiled for vet is reused by the tests, the
# sandbox and the operator image instead of being compiled again.
export CGO_ENABLED := 0
CONTROLLER_GEN := $(GO) tool controller-gen
# Generated files, checked for drift by `make test`.
GENERATED := api/v1alpha2/zz_generated.deepcopy.go charts/etcd-operator/crd-bases charts/etcd-operator/files/role.yaml docs/api-reference.md

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE ?= ghcr.io/seed74754924/etcd-operator:$(VERSION)
IMAGE_TAR := bin/etcd-operator-image.tar
# The crash suite's operator: the same code with fault injection compiled in
# (build tag faultinjection); never the image a user runs.
FAULTS_IMAGE ?= $(firstword $(subst :, ,$(IMAGE))):faults-$(VERSION)
FAULTS_IMAGE_TAR := bin/etcd-operator-faults-image.tar

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build the pinned toolchain (Kubernetes, etcd, containerd, CoreDNS, linter, Helm, MinIO, cert-manager, promtool) from the module proxy; prints its bin directory.
	@hack/tools.sh

.PHONY: sandbox-deps
sandbox-deps: ## Install the sandbox nodes' Debian packages (runc, CNI plugins, nftables) if missing.
	@hack/sandbox-deps.sh

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs, the operator's RBAC rules and docs/api-reference.md.
	$(CONTROLLER_GEN) object:headerFile="" paths=./api/...
	rm -rf charts/etcd-operator/crd-bases
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=charts/etcd-operator/crd-bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./internal/controller/... output:rbac:artifacts:config=charts/etcd-operator/files
	$(GO) run ./hack/apiref charts/etcd-operator/crd-bases docs/api-reference.md

# No -trimpath here: it changes every package's build and would compile all
# dependencies a second time (minutes on a cold cache); the Dockerfile's
# release build trims paths.
.PHONY: manager
manager: ## Build the operator binary (static) into bin/manager.
	$(GO) build -ldflags "-s -w -X main.version=$(VERSION)" -o bin/manager ./cmd/etcd-operator

.PHONY: etcd-tools
etcd-tools: ## Build the small binary member Pods run (data guard, join gate) into bin/etcd-tools.
	$(GO) build -ldflags "-s -w" -o bin/etcd-tools ./cmd/etcd-tools

.PHONY: image
image: manager etcd-tools ## Build the operator's OCI image tarball (bin/etcd-operator-image.tar) without a container engine.
	$(GO) run ./hack/image --binary bin/manager --tools bin/etcd-tools --ref $(IMAGE) --out $(IMAGE_TAR)

.PHONY: manager-faults
manager-faults: ## (tests) The operator binary with fault injection (bin/manager-faults), for the crash suite only.
	$(GO) build -tags faultinjection -ldflags "-s -w -X main.version=$(VERSION)" -o bin/manager-faults ./cmd/etcd-operator

.PHONY: image-faults
image-faults: manager-faults etcd-tools ## (tests) The operator image with fault injection, for the crash suite only.
	$(GO) run ./hack/image --binary bin/manager-faults --tools bin/etcd-tools --ref $(FAULTS_IMAGE) --out $(FAULTS_IMAGE_TAR)

# --- kubectl-etcd ---------------------------------------------------------------
CLI_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
CLI_DIR := bin/cli
# What the kubectl-etcd archives carry besides the binary: completions/ with
# the shell completion scripts, and kubectl_complete-etcd, which kubectl 1.26+
# runs to complete `kubectl etcd`.
CLI_COMPLETIONS := bin/cli-completions
CLI_ARCHIVE_EXTRAS := completions kubectl_complete-etcd

.PHONY: cli-completions
cli-completions: ## Generate kubectl-etcd's shell completion scripts (bin/cli-completions/) with a kubectl-etcd built for this machine.
	rm -rf $(CLI_COMPLETIONS) && mkdir -p $(CLI_COMPLETIONS)/completions
	$(GO) build -o $(CLI_COMPLETIONS)/kubectl-etcd ./cmd/kubectl-etcd
	for shell in bash zsh fish powershell; do \
		case $$shell in powershell) ext=ps1 ;; *) ext=$$shell ;; esac; \
		$(CLI_COMPLETIONS)/kubectl-etcd completion $$shell > $(CLI_COMPLETIONS)/completions/kubectl-etcd.$$ext; \
	done
	rm $(CLI_COMPLETIONS)/kubectl-etcd
	chmod 0755 $(CLI_COMPLETIONS)/completions && chmod 0644 $(CLI_COMPLETIONS)/completions/*
	install -m 0755 cmd/kubectl-etcd/kubectl_complete-etcd $(CLI_COMPLETIONS)/

.PHONY: cli
cli: cli-completions ## Build kubectl-etcd for linux and darwin on amd64 and arm64 (bin/cli/): binaries, krew archives with completion scripts, cli-SHA256SUMS.txt and the krew manifest.
	rm -rf $(CLI_DIR) && mkdir -p $(CLI_DIR)
	for p in $(CLI_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(CLI_DIR)/kubectl-etcd-$$os-$$arch; \
		GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $$out ./cmd/kubectl-etcd; \
		stage=$$(mktemp -d); cp $$out $$stage/kubectl-etcd; cp README.md LICENSE $$stage/; cp -Rp $(CLI_COMPLETIONS)/. $$stage/; \
		tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C $$stage -cf - kubectl-etcd LICENSE README.md $(CLI_ARCHIVE_EXTRAS) | gzip -n > $$out.tar.gz; \
		rm -rf $$stage; \
	done
	cd $(CLI_DIR) && sha256sum kubectl-etcd-* > cli-SHA256SUMS.txt
	hack/krew/render.sh $(VERSION) $(CLI_DIR)/cli-SHA256SUMS.txt > $(CLI_DIR)/etcd.yaml
	@cat $(CLI_DIR)/cli-SHA256SUMS.txt

# --- release ----------------------------------------------------------------------
# make release builds everything a release publishes into dist/; it pushes
# nothing (.github/workflows/release.yaml publishes on a tag).
DIST := dist
RELEASE_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
IMAGE_PLATFORMS := linux/amd64 linux/arm64
# The chart's version: the tag without its v, or 0.0.0-dev-<describe> between
# tags (hack/chart-version.sh).
CHART_VERSION ?= $(shell hack/chart-version.sh '$(VERSION)')
RELEASE_LDFLAGS = -s -w -X main.version=$(VERSION)
# Who built the release and which run, for its provenance (the workflow
# names its run).
RELEASE_BUILDER ?= local
RELEASE_INVOCATION ?=

.PHONY: release
release: tools cli-completions ## Build a release into dist/ (nothing is pushed): multi-arch operator image (OCI layout), its SBOM, the packaged chart, kubectl-etcd (with completion scripts) and etcd-migrate archives, SHA256SUMS.txt, the krew manifest.
	rm -rf $(DIST) && mkdir -p $(DIST)/bin
	for p in $(IMAGE_PLATFORMS); do \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $(DIST)/bin/manager-$${p%/*}-$${p#*/} ./cmd/etcd-operator; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $(DIST)/bin/etcd-tools-$${p%/*}-$${p#*/} ./cmd/etcd-tools; \
	done
	$(GO) run ./hack/image $(foreach p,$(IMAGE_PLATFORMS),--platform $(p)=$(DIST)/bin/manager-$(subst /,-,$(p)),$(DIST)/bin/etcd-tools-$(subst /,-,$(p))) \
		--ref $(IMAGE) --out $(DIST)/etcd-operator-image.oci.tar
	$(GO) run ./hack/sbom --name etcd-operator-image --version $(VERSION) \
		--created "$$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)" $(DIST)/bin/manager-* $(DIST)/bin/etcd-tools-* > $(DIST)/etcd-operator-image.spdx.json
	"$$(hack/tools.sh --dir)/helm" package charts/etcd-operator --version $(CHART_VERSION) --app-version $(VERSION) -d $(DIST) >/dev/null
	for cmd in kubectl-etcd etcd-migrate; do for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; stage=$$(mktemp -d); \
		GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $$stage/$$cmd ./cmd/$$cmd; \
		cp LICENSE README.md $$stage/; extras=; \
		if [[ $$cmd == kubectl-etcd ]]; then cp -Rp $(CLI_COMPLETIONS)/. $$stage/; extras="$(CLI_ARCHIVE_EXTRAS)"; fi; \
		tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C $$stage -cf - $$cmd LICENSE README.md $$extras \
			| gzip -n > $(DIST)/$$cmd-$$os-$$arch.tar.gz; \
		rm -rf $$stage; \
	done; done
	rm -rf $(DIST)/bin
	$(GO) run ./hack/provenance --version $(VERSION) --commit "$$(git rev-parse HEAD)" --builder "$(RELEASE_BUILDER)" \
		--invocation "$(RELEASE_INVOCATION)" --started "$$(date -u +%FT%TZ)" \
		$(DIST)/*.tar.gz $(DIST)/*.tgz $(DIST)/*.oci.tar $(DIST)/*.spdx.json > $(DIST)/provenance.json
	cd $(DIST) && sha256sum *.tar.gz *.tgz *.oci.tar *.spdx.json provenance.json > SHA256SUMS.txt
	hack/krew/render.sh $(VERSION) $(DIST)/SHA256SUMS.txt > $(DIST)/krew-etcd.yaml
	if [[ -n "$${COSIGN_KEY:-}$${COSIGN_KEYLESS:-}" ]]; then hack/sign-release.sh blobs $(DIST); fi
	@ls -1 $(DIST)

# The release check of make test: make release, signed with a throwaway key
# (bin/release-key, made on first use), then test/release reads dist/ back
# and verifies every signature, and the image's signature and attestations
# once pushed to a registry of its own (the e2e tier then installs the
# packaged chart from dist/).
RELEASE_KEY := bin/release-key/cosign.key
.PHONY: release-check
release-check: export COSIGN_KEY = $(CURDIR)/$(RELEASE_KEY)
release-check: export COSIGN_PASSWORD = release-check
release-check: $(RELEASE_KEY) release $(TESTTIMES)
	RELEASE_DIST=$(CURDIR)/$(DIST) RELEASE_VERSION=$(VERSION) RELEASE_CHART_VERSION=$(CHART_VERSION) RELEASE_IMAGE=$(IMAGE) \
		RELEASE_COSIGN_PUB=$(CURDIR)/bin/release-key/cosign.pub \
		$(TOOLS_ENV) $(GO) test -json -count=1 -timeout 10m ./test/release/... | $(RECORD) release

$(RELEASE_KEY): | tools
	mkdir -p $(@D) && cd $(@D) && COSIGN_PASSWORD=release-check "$$(cd $(CURDIR) && hack/tools.sh --dir)/cosign" generate-key-pair >/dev/null

.PHONY: check-generate
check-generate: ## Fail if the committed generated files are stale.
	@before=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	$(MAKE) --no-print-directory generate >/dev/null; \
	after=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	if [[ "$$before" != "$$after" ]]; then \
		echo "Generated files were stale and have been regenerated; review and commit them:"; \
		diff <(echo "$$before") <(echo "$$after") || true; \
		exit 1; \
	fi

# --- tests ----------------------------------------------------------------------
# Each go test runs with -json through hack/testtimes (bin/testtimes), which
# prints what go test prints without -json as the tests run and keeps the
# events in bin/test-times/<tier>.json; `make test` also times each step and
# prints the slowest tests and each tier's time at the end, after a failure too.

# Built under make -n too (the +): `make -n test` runs it to show each step.
$(TESTTIMES): $(wildcard hack/testtimes/*.go)
	+$(GO) build -o $@ ./hack/testtimes

.PHONY: vet
vet: ## go vet.
	$(GO) vet ./...
	$(GO) vet -tags faultinjection ./cmd/etcd-operator/

.PHONY: lint
# --allow-serial-runners: a second lint on the machine (another checkout, an
# editor) makes this one wait for it instead of failing.
lint: tools ## golangci-lint with the project's config.
	"$$(hack/tools.sh | tail -n1)/golangci-lint" run --allow-serial-runners ./...

.PHONY: unit
unit: tools $(TESTTIMES) ## Unit tests (no API server, no sandbox; the agents' run real etcd, etcdutl and MinIO from the toolchain).
	ETCD_OPERATOR_TOOLS_BIN="$$(hack/tools.sh | tail -n1)" $(GO) test -json -count=1 $$($(GO) list ./... | grep -v -E '/test/(api|certmanager|e2e|release|sandbox|scale)(/|$$)') \
		| $(RECORD) unit

.PHONY: test-api
test-api: tools $(TESTTIMES) ## CRD tests on a real kube-apiserver.
	ETCD_OPERATOR_TOOLS_BIN="$$(hack/tools.sh | tail -n1)" $(GO) test -json -count=1 -timeout 10m ./test/api/... | $(RECORD) api

# hack/cert-manager is a module of its own; its tests run the toolchain's
# build of it (make tools) against a bare kube-apiserver. test/certmanager
# runs the same binary as the sandbox installs it (RBAC, arguments).
.PHONY: test-cert-manager
test-cert-manager: tools $(TESTTIMES) ## cert-manager's real controllers issue and renew on a real kube-apiserver, with the sandbox's RBAC.
	ETCD_OPERATOR_TOOLS_BIN="$$(hack/tools.sh | tail -n1)" $(GO) test -json -count=1 -timeout 10m ./test/certmanager/... \
		| $(RECORD) cert-manager
	bin="$$(hack/tools.sh | tail -n1)"; cd hack/cert-manager && GOWORK=off ETCD_OPERATOR_TOOLS_BIN="$$bin" \
		CERT_MANAGER_CONTROLLER="$$bin/cert-manager-controller" $(GO) test -json -count=1 -timeout 10m . \
		| $(RECORD) -append cert-manager

# --- sandbox (a local Kubernetes with real nodes, no container engine; needs root)
# The toolchain's bin directory comes first on PATH, so kubectl is the pinned one.
TOOLS_ENV = ETCD_OPERATOR_TOOLS_BIN="$$(hack/tools.sh | tail -n1)" PATH="$$(hack/tools.sh --dir):$$PATH"
.PHONY: sandbox-bin
sandbox-bin: ## Build the sandbox binary into bin/sandbox.
	$(GO) build -o bin/sandbox ./cmd/sandbox

.PHONY: sandbox
SANDBOX_WITH ?=
sandbox: tools sandbox-deps sandbox-bin image ## Run the operator on a local 3-node sandbox with a 3-member etcd cluster and MinIO, and print what to try (SANDBOX_WITH=prometheus,cert-manager adds those).
	$(TOOLS_ENV) bin/sandbox up $(if $(SANDBOX_WITH),--with $(SANDBOX_WITH))
	$(TOOLS_ENV) hack/sandbox-install.sh .sandbox $(IMAGE_TAR)
	@echo
	@echo "The operator runs and etcd cluster 'example' is Available. Try:"
	@echo "  export KUBECONFIG=$(CURDIR)/.sandbox/kubeconfig PATH=$$(hack/tools.sh --dir):\$$PATH"
	@echo "  kubectl get etcdcluster,etcdmember,pods -o wide"
	@echo "  kubectl exec example-<suffix> -- etcdctl put hello world       # any member Pod"
	@echo "  kubectl scale etcdcluster/example --replicas=5                 # grow, one learner at a time"
	@echo "  kubectl get events --sort-by=.lastTimestamp                    # every membership change"
	@echo "  kubectl scale etcdcluster/example --replicas=0                 # pause; scale up to resume"
	@echo "  kubectl apply -f examples/snapshot-s3.yaml                     # snapshot into the sandbox's MinIO"
	@echo "  kubectl apply -f examples/restore-s3.yaml                      # a new cluster from that snapshot"
	@echo "  bin/sandbox fault stop-node node-1                             # or kill, partition, wipe: docs/sandbox.md"
	@echo "  make sandbox-down                                              # remove everything"

.PHONY: sandbox-down
sandbox-down: ## Stop the sandbox and remove everything it made (works after a crash too).
	@if [[ -x bin/sandbox ]]; then bin/sandbox down; else $(GO) run ./cmd/sandbox down; fi

SANDBOX_DEPS := tools sandbox-deps $(TESTTIMES)
.PHONY: test-sandbox
test-sandbox: $(SANDBOX_DEPS) ## The sandbox's own end-to-end tests (needs root; starts its own sandboxes).
	@$(MAKE) --no-print-directory run-sandbox

.PHONY: run-sandbox
run-sandbox:
	$(TOOLS_ENV) $(GO) test -json -count=1 -timeout 20m ./test/sandbox/... | $(RECORD) sandbox

# The integration tier: the end-to-end suites that need no real node, run on
# procnode (a real control plane; nodes that run Pods as processes in a
# namespace of the test's own; see docs/testing.md). Root, no sandbox.
INTEGRATION := TestSnapshotBefore|TestVersionRules|TestDeletionLeavesNothing|TestNamespaceDeletion|TestDataDirLossReplaced|TestMetricsServedSecurely|TestQuorumLossRecovered|TestQuorumLossRecoveredFromSnapshot|TestDefragReclaimsSpace|TestDefragClearsNOSPACE
INTEGRATION_DEPS := tools manager manager-faults etcd-tools $(TESTTIMES)
.PHONY: test-integration
test-integration: $(INTEGRATION_DEPS) ## The suites that need no real node, on a real control plane with Pods as processes (needs root; no sandbox).
	@$(MAKE) --no-print-directory run-integration

# run-sandbox, run-integration and run-e2e are those tiers' tests without
# building what they need: make test builds it first (test-deps), then runs
# tiers at the same time (they spend most of their time waiting on etcd and
# the kubelet, and each sandbox or integration run has network and mount
# namespaces of its own).
.PHONY: run-integration
run-integration:
	E2E_TIER=integration $(TOOLS_ENV) $(GO) test -json -count=1 -timeout 30m -parallel 4 -run '^($(INTEGRATION))$$' ./test/e2e/... \
		| $(RECORD) integration

# Every suite the integration tier can run; make test-full runs them all there.
INTEGRATION_FULL := $(INTEGRATION)|TestClientServiceServesVotersOnly|TestSnapshotVerified|TestBootstrap|TestScale|TestAuthentication|TestOperatorCrashAtEveryStep|TestDeletedClaimReplacesMember|TestLeaderHandsOverBeforeRemoval|TestPauseAndResume|TestSpecEditMidScaleWaitsForTheBoundary|TestImpossibleTargetThenFixed|TestOwnTLSSecrets|TestTmpfsMemberReplaced|TestRollingUpgrade|TestSettingsRollOut
.PHONY: test-integration-full
test-integration-full: $(INTEGRATION_DEPS) ## Every suite the integration tier can run (needs root).
	@$(MAKE) --no-print-directory run-integration-full

.PHONY: run-integration-full
run-integration-full:
	E2E_TIER=integration $(TOOLS_ENV) $(GO) test -json -count=1 -timeout 60m -parallel 2 -run '^($(INTEGRATION_FULL))$$' ./test/e2e/... \
		| $(RECORD) integration

# The end-to-end suites of make test: what only real nodes prove, within its
# 20-minute budget. Every other suite runs in make test-full; docs/testing.md
# names what proves the same in make test.
E2E_CORE := TestDrainKeepsQuorum|TestNodeLossReplacesMember|TestPlacementOnTaintedNode|TestPeerPartitionDuringRoll|TestMigrate|TestTLSModes|TestSnapshotAndRestore|TestSandboxPrometheus
E2E_CORE_SKIP := ^TestSnapshotAndRestore$$/^failures$$
E2E_DEPS := tools sandbox-deps sandbox-bin image $(TESTTIMES)
.PHONY: test-e2e
test-e2e: $(E2E_DEPS) ## The operator's core end-to-end suites on a sandbox of their own (needs root).
	@$(MAKE) --no-print-directory run-e2e

.PHONY: run-e2e
run-e2e:
	E2E_CHART="$$(ls $(CURDIR)/$(DIST)/etcd-operator-*.tgz 2>/dev/null | head -n1)" \
		$(TOOLS_ENV) $(GO) test -json -count=1 -timeout 40m -parallel 3 -run '^($(E2E_CORE))$$' -skip '$(E2E_CORE_SKIP)' ./test/e2e/... | $(RECORD) e2e

# What run-sandbox, run-integration and run-e2e need, built once before they
# run beside other steps.
.PHONY: test-deps
test-deps: $(sort $(SANDBOX_DEPS) $(INTEGRATION_DEPS) $(E2E_DEPS))

.PHONY: test-e2e-full
test-e2e-full: $(E2E_DEPS) image-faults ## Every end-to-end suite (needs root; about 30 minutes).
	@$(MAKE) --no-print-directory run-e2e-full

.PHONY: run-e2e-full
run-e2e-full:
	$(TOOLS_ENV) $(GO) test -json -count=1 -timeout 75m -parallel 2 -skip '^TestOperatorUpgrade$$' ./test/e2e/... | $(RECORD) e2e

# The operator upgrade drill (TestOperatorUpgrade) starts from the previous
# release: the last tag once there is one; until then this pinned commit of
# main, whose image and chart hack/previous-release.sh builds from this
# clone's history into bin/previous/.
UPGRADE_FROM ?= 7ee4cdedb03c1cf3a2ba64c2049e01b42fe6c0bc
.PHONY: previous-release
previous-release: ## (tests) The image and chart of the release the upgrade drill starts from (UPGRADE_FROM).
	hack/previous-release.sh $(UPGRADE_FROM) bin/previous

.PHONY: test-upgrade
test-upgrade: $(E2E_DEPS) previous-release ## The operator upgrade drill on a sandbox of its own: the previous release, then helm upgrade, then helm rollback (needs root).
	@$(MAKE) --no-print-directory run-upgrade

.PHONY: run-upgrade
run-upgrade:
	E2E_UPGRADE_FROM="$(CURDIR)/bin/previous/$$(git rev-parse --verify '$(UPGRADE_FROM)^{commit}')" \
		$(TOOLS_ENV) $(GO) test -json -count=1 -timeout 40m -run '^TestOperatorUpgrade$$' ./test/e2e/ | $(RECORD) upgrade

.PHONY: bench
bench: tools sandbox-deps sandbox-bin image image-faults ## Time the scenarios of DESIGN.md section 6 on a fresh sandbox; prints a table, writes bench/results.json.
	$(TOOLS_ENV) $(GO) test -count=1 -tags bench -timeout 60m -run '^TestBench$$' -v ./test/e2e/ | grep -v '^=== \|^--- \|^PASS\|^ok '

SCALE_FLEETS ?= 100,300,1000
SCALE_REST ?= 60s
.PHONY: scale
scale: tools ## One operator in front of fleets of hollow 3-member clusters (SCALE_FLEETS); prints a table, writes bench/scale.json (needs root).
	SCALE_FLEETS=$(SCALE_FLEETS) SCALE_REST=$(SCALE_REST) $(TOOLS_ENV) $(GO) test -count=1 -timeout 180m -run '^TestScale$$' -v ./test/scale/ \
		| grep -v '^=== \|^--- \|^PASS\|^ok '

SOAK_DURATION ?= 30m
SOAK_SEED ?= 0
SOAK_CLUSTERS ?= 2
.PHONY: soak
soak: tools sandbox-deps sandbox-bin image image-faults ## A seeded random schedule of faults (SOAK_DURATION, SOAK_SEED, SOAK_CLUSTERS) on a fresh sandbox, with writers and readers; report in bin/soak-report.{txt,json}.
	$(TOOLS_ENV) $(GO) test -count=1 -tags soak -timeout 0 -run '^TestSoak$$' -v ./test/e2e/ \
		-soak.duration=$(SOAK_DURATION) -soak.seed=$(SOAK_SEED) -soak.clusters=$(SOAK_CLUSTERS) | grep -v '^{"level"'

# make test's steps in order, each as <tier>:<target>. They run one at a time,
# each in a make of its own, stopping at the first failure (or not, with -k);
# steps joined by + run at the same time. The unit tier keeps both cores
# busy, so it runs alone; the others mostly wait on API servers, etcd and
# kubelets, so they share the machine: the API and cert-manager tiers beside
# the sandbox's own tests, then the integration tier beside the end-to-end
# suites.
TEST_STEPS := static:tools static:check-generate static:vet static:lint unit:unit static:test-deps \
	api:test-api+cert-manager:test-cert-manager+sandbox:run-sandbox+release:release-check integration:run-integration+e2e:run-e2e

# make test-full: the same steps with every end-to-end suite.
TEST_FULL_STEPS := $(filter-out integration:run-integration+e2e:run-e2e,$(TEST_STEPS)) \
	static:image-faults integration:run-integration-full+e2e:run-e2e-full \
	static:previous-release upgrade:run-upgrade

.PHONY: test-full
test-full: $(TESTTIMES) ## make test with every end-to-end suite (about 45 minutes): run before calling an issue that touches a suite's area resolved.
	@$(TESTTIMES) run -dir $(TEST_TIMES) -make "$(MAKE)" $(TEST_FULL_STEPS)
	@echo "make test-full: all checks passed"

.PHONY: test
test: $(TESTTIMES) ## Everything CI checks; ends with the slowest tests and each tier's time, also when a step fails.
	@$(TESTTIMES) run -dir $(TEST_TIMES) -make "$(MAKE)" $(TEST_STEPS)
	@echo "make test: all checks passed"

.PHONY: test-times
test-times: $(TESTTIMES) ## Print the slowest tests and each tier's time of the last run again (bin/test-times/).
	@$(TESTTIMES) summary -dir $(TEST_TIMES)
