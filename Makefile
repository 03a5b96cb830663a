# Dev/CI entry points. Backing services (Redis, PostgreSQL, MariaDB on
# loopback) are managed by scripts/services.sh; see `make services`.

GO ?= go
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt

# Extra flags for `go test` in `make test`, e.g. TESTFLAGS='-run TestFoo -v'.
TESTFLAGS ?=
# Flags for the demo binary, e.g. DEMOFLAGS='-duration 30s'.
DEMOFLAGS ?=
# Extra flags for `make bench`, e.g. BENCHFLAGS='-benchmem -count 5'.
BENCHFLAGS ?=
# Space-separated pkgpath:FuzzName pairs; empty disables the fuzz step.
FUZZ_TARGETS ?= ./internal/change:FuzzParse
FUZZTIME_SHORT ?= 15s
FUZZTIME_LONG ?= 2m

.DEFAULT_GOAL := build
.PHONY: services build test demo bench fuzz clean

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
	$(call run_fuzz,$(FUZZTIME_SHORT))

demo: services
	$(GO) run ./benchmarks/demo $(DEMOFLAGS)

bench: services
	$(GO) test -run '^$$' -bench . -benchtime 3s $(BENCHFLAGS) ./benchmarks/...

fuzz:
	$(call run_fuzz,$(FUZZTIME_LONG))

clean:
	rm -rf bin/

# $(call run_fuzz,<fuzztime>): fuzz each FUZZ_TARGETS entry in turn.
# `go test -fuzz` accepts one target per package run, hence the anchored regexp.
define run_fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; \
		if [ "$$pkg" = "$$t" ] || [ -z "$$pkg" ] || [ -z "$$fn" ]; then \
			echo "bad FUZZ_TARGETS entry '$$t' (want pkgpath:FuzzName)" >&2; exit 2; \
		fi; \
		if ! $(GO) test -list "^$$fn\$$" "$$pkg" | grep -qx "$$fn"; then \
			echo "fuzz target $$fn not found in $$pkg (check FUZZ_TARGETS)" >&2; exit 1; \
		fi; \
		echo "$(GO) test -run '^\$$' -fuzz '^$$fn\$$' -fuzztime $(1) $$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(1) "$$pkg"; \
	done
endef
