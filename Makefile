# Dev/CI entry points. Backing services (Redis, PostgreSQL, MariaDB on
# loopback) are managed by scripts/services.sh; see `make services`.

GO ?= go
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt

# Extra flags for `go test` in `make test`, e.g. TESTFLAGS='-run TestFoo -v'.
TESTFLAGS ?=
# Flags for the demo binary, e.g. DEMOFLAGS='-duration 30s'.
DEMOFLAGS ?=
# Extra flags for the Go micro-benchmarks of `make bench`, e.g. BENCHFLAGS='-benchmem -count 5'.
BENCHFLAGS ?=
# Space-separated pkgpath:FuzzName pairs; empty disables the fuzz step.
FUZZ_TARGETS ?= ./internal/change:FuzzParse ./mappings:FuzzMatch ./benchmarks/tpcc:FuzzDecodeRows ./internal/resp:FuzzProtocol ./internal/sqlcheck:FuzzCheckDML ./internal/sqlcheck:FuzzSingleRowInsert ./internal/sqlcheck:FuzzSingleKeyedWrite ./internal/session:FuzzDecodeObject ./internal/session:FuzzDecodeCommit ./internal/session:FuzzSplitObject ./internal/session:FuzzEncodeObject ./internal/session:FuzzPatchEntry ./internal/jsonenc:FuzzValue ./internal/jsonscan:FuzzScan ./internal/jsonscan:FuzzUnquote ./internal/change:FuzzDecode ./pkg/client:FuzzCacheManyAnswer
FUZZTIME_SHORT ?= 15s
FUZZTIME_LONG ?= 2m
# How long the fuzzer may spend shrinking one input. Go's default (60s) is
# spent on every input that finds new coverage, not only on failures: with a
# 15s -fuzztime, FuzzProtocol (a TCP round trip per input) used to stop after
# its first new input and fuzz nothing more ("0/sec"). A failing input is
# written either way, smaller or not.
FUZZMINIMIZETIME ?= 5s

.DEFAULT_GOAL := build
.PHONY: services build test test-near-off demo bench fuzz clean

services:
	bash scripts/services.sh up

build:
	$(GO) build ./...
	$(GO) build -o bin/writeback ./cmd/writeback

test: services
	@echo "gofmt -l ."; \
	out="$$($(GOFMT) -l .)" || exit 1; \
	if [ -n "$$out" ]; then \
		echo "these files are not gofmt-formatted (run: gofmt -w <file>):" >&2; \
		echo "$$out" >&2; \
		exit 1; \
	fi
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m $(TESTFLAGS) ./...
	$(MAKE) --no-print-directory test-near-off
	$(call run_fuzz,$(FUZZTIME_SHORT))
	$(MAKE) --no-print-directory chart-test

# make test-near-off (part of make test): the e2e suite again with every
# sidecar's near cache off (the sidecars inherit WRITEBACK_NEAR_CACHE;
# writeback.nearCache is on by default), the mode a deployment may choose:
# it must behave as it did before the near cache existed.
test-near-off: services
	WRITEBACK_NEAR_CACHE=off $(GO) test -race -count=1 -timeout 20m $(TESTFLAGS) ./e2e/...

demo: services
	$(GO) run ./benchmarks/cmd/demo $(DEMOFLAGS)

# make bench: a quick run of every benchmark (about 20 minutes on 2 cores):
# YCSB A/B/C/S under every policy plus the applier sweep, then the near
# cache's read targets and the remote target (below), BG on MongoDB and PostgreSQL, TPC-C as
# sessions, then the Go micro-benchmarks. Tables go to stdout, JSON and PNG
# plots to benchmarks/results/. BENCH_SIZE= (empty) runs the full sizes;
# YCSBFLAGS, BGFLAGS, TPCCFLAGS and BENCHFLAGS add flags to each step (see
# benchmarks/README.md).
#
# The read targets: YCSB B and C through the Redis-protocol front door on a
# Unix socket (an application on the sidecar's node; the database over TCP,
# as a remote one is) and embedded, in three rounds of the database alone
# and each, side by side; the step fails unless the medians of the rounds'
# ratios reach C >= 1.5x and B >= 1.3x the database through the front door
# and C >= 10x embedded, on PostgreSQL and on MariaDB.
#
# The remote target: YCSB A with the database behind a latency proxy adding
# 1 ms each way (Redis local), 16 client threads, zipfian and uniform keys,
# the database alone and through the front door in three rounds side by
# side; the step fails unless the medians reach 5x on PostgreSQL and on
# MariaDB and write-back's update p50 is at most a quarter of the
# database's.
BENCH_SIZE ?= --quick
BENCHTIME ?= 1s
READ_TARGETS = C:write-back-resp/database>=1.5,B:write-back-resp/database>=1.3,C:write-back-embedded/database>=10
REMOTE_TARGETS = A:write-back-resp/database>=5,A:update-p50(write-back-resp/database)<=0.25
bench: services
	$(GO) run ./benchmarks/cmd/ycsb $(BENCH_SIZE) $(YCSBFLAGS)
	$(GO) run ./benchmarks/cmd/ycsb $(BENCH_SIZE) --store postgres,mysql --policies database,write-back-resp,write-back-embedded \
		--workloads B,C --cache warm --resp-socket --rounds 3 --sweep-workers '' --out benchmarks/results/read-targets --require '$(READ_TARGETS)'
	$(GO) run ./benchmarks/cmd/ycsb $(BENCH_SIZE) --store postgres,mysql --policies database,write-back-resp \
		--workloads A --distribution zipfian,uniform --cache warm --store-latency 1ms --threads 16 --rounds 3 --sweep-workers '' \
		--out benchmarks/results/remote-a --require '$(REMOTE_TARGETS)'
	$(GO) run ./benchmarks/cmd/bg $(BENCH_SIZE) $(BGFLAGS)
	$(GO) run ./benchmarks/cmd/tpcc $(BENCH_SIZE) $(TPCCFLAGS)
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) $(BENCHFLAGS) ./benchmarks/
	$(GO) test -run '^$$' -bench BenchmarkWriteBatchConcurrent -benchtime $(BENCHTIME) $(BENCHFLAGS) ./internal/buffer/

fuzz:
	$(call run_fuzz,$(FUZZTIME_LONG))

clean:
	rm -rf bin/

# $(call run_fuzz,<fuzztime>): fuzz each FUZZ_TARGETS entry in turn.
# `go test -fuzz` accepts one target per package run, hence the anchored regexp.
#
# Go's fuzz coordinator before Go 1.27 can fail a run that found nothing with
# a bare "context deadline exceeded" as -fuzztime ends (golang/go#75804: the
# deadline that stops the workers escapes its filter). Such a run wrote no
# failing input; it is reported and does not fail the step. Any other failure,
# and any run that wrote an input to testdata/fuzz/<FuzzName>, fails it.
define run_fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; \
		if [ "$$pkg" = "$$t" ] || [ -z "$$pkg" ] || [ -z "$$fn" ]; then \
			echo "bad FUZZ_TARGETS entry '$$t' (want pkgpath:FuzzName)" >&2; exit 2; \
		fi; \
		if ! $(GO) test -list "^$$fn\$$" "$$pkg" | grep -qx "$$fn"; then \
			echo "fuzz target $$fn not found in $$pkg (check FUZZ_TARGETS)" >&2; exit 1; \
		fi; \
		corpus="$$pkg/testdata/fuzz/$$fn"; \
		before="$$(ls "$$corpus" 2>/dev/null | sort)"; \
		log="$$(mktemp)"; rc=0; \
		echo "$(GO) test -run '^\$$' -fuzz '^$$fn\$$' -fuzztime $(1) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(1) -fuzzminimizetime $(FUZZMINIMIZETIME) "$$pkg" > "$$log" 2>&1 || rc=$$?; \
		cat "$$log"; \
		if [ "$$rc" -ne 0 ]; then \
			if [ "$$before" = "$$(ls "$$corpus" 2>/dev/null | sort)" ] && grep -qx '    context deadline exceeded' "$$log"; then \
				echo "fuzz: $$fn: the Go toolchain's end-of-fuzztime race (golang/go#75804), no failing input written: not a failure" >&2; \
			else \
				rm -f "$$log"; exit 1; \
			fi; \
		fi; \
		rm -f "$$log"; \
	done
endef

# ---------------------------------------------------------------------------
# chart-test: the Helm chart in helm/writeback. Helm is built from the Go
# module proxy at a pinned version into bin/helm (skipped when bin/helm already
# reports that version), with the link flags of Helm's own release builds so
# that it reports its version and defaults to the Kubernetes version it was
# built against (v3.17.x: client-go v0.32 -> Kubernetes 1.32) instead of 1.20.
HELM_VERSION := v3.17.4
HELM_K8S_MINOR := 32
CHART := helm/writeback
CHART_EXAMPLES = $(sort $(wildcard $(CHART)/examples/*.yaml))
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)

.PHONY: chart-test helm-bin

helm-bin:
	@if [ -x bin/helm ] && [ "$$(bin/helm version --template '{{.Version}}' 2>/dev/null)" = "$(HELM_VERSION)" ]; then \
		echo "bin/helm $(HELM_VERSION) (cached)"; \
	else \
		echo "building bin/helm $(HELM_VERSION) from the Go module proxy (the first build takes a few minutes)"; \
		GOBIN=$(CURDIR)/bin $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION) || exit 1; \
		test "$$(bin/helm version --template '{{.Version}}')" = "$(HELM_VERSION)" || { echo "bin/helm does not report $(HELM_VERSION)" >&2; exit 1; }; \
	fi

chart-test: helm-bin
	@set -e; test -n "$(CHART_EXAMPLES)" || { echo "no values examples in $(CHART)/examples" >&2; exit 1; }; \
	for f in $(CHART_EXAMPLES); do \
		echo "helm lint --strict $(CHART) -f $$f"; \
		bin/helm lint --strict --quiet $(CHART) -f $$f; \
		echo "helm template $(CHART) -f $$f"; \
		bin/helm template writeback $(CHART) -f $$f >/dev/null; \
	done
	cd deploy/charttest && $(GO) test -count=1 ./...
