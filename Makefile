# Sluice: the build front door. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go

# sluice_failpoints compiles in the sinks' failpoints, which the crash
# tests arm (sink/failpoint.go).
TEST_FLAGS ?= -race -count=1 -timeout 40m -tags sluice_failpoints
PKGS ?= ./...

.PHONY: help build run test test-unit test-deploy bench lint fuzz screenshots services-up services-down services-status

help:
	@echo 'make build          go build -o bin/sluice ./cmd/sluice'
	@echo 'make run            build, then bin/sluice dev (reads SLUICE_ADDR, SLUICE_DATA)'
	@echo 'make test           the full lane: install + start ZooKeeper, Redis, versitygw, Chromium; go test; stop them'
	@echo 'make test-unit      the fast lane: go test -short, no services (tests that need one skip)'
	@echo 'make test-deploy    the deploy/ module: manifests, compose file, dashboard, the compose stack as processes'
	@echo 'make bench          Go benchmarks, then every bin/sluice bench scenario (services up); table in bench-results.md'
	@echo 'make lint           go vet, gofmt and golangci-lint (.golangci.yml: the linters and the package layering)'
	@echo 'make fuzz           each fuzz target in FUZZ_TARGETS for FUZZ_EXECS executions'
	@echo 'make screenshots    the dashboard test in Chromium, saving each page to docs/screenshots'
	@echo 'make services-up    install + start the services; then: source .services/env'
	@echo 'make services-down  stop them'

build:
	$(GO) build -o bin/sluice ./cmd/sluice

# SLUICE_ADDR and SLUICE_DATA, when set, reach the binary through the environment.
run: build
	./bin/sluice dev --kafka-addr 127.0.0.1:9092

# make test: the full lane (what CI runs). Every test runs against the real
# services; none may skip. The events go to TEST_JSON; the output is what
# plain go test prints, then the ten slowest packages and tests.
TEST_JSON ?= test-results.json
test: bin/testreport
	scripts/with-services.sh bash -c 'set -o pipefail; $(GO) test -json $(TEST_FLAGS) $(PKGS) | bin/testreport -o $(TEST_JSON)'
	$(MAKE) test-deploy

# make test-unit: the fast lane, with no services: go test -short, where a
# test that needs a service or real processes skips (only under -short).
UNIT_FLAGS ?= -short -count=1 -timeout 10m -tags sluice_failpoints
UNIT_JSON ?= test-unit-results.json
test-unit: bin/testreport
	set -o pipefail; $(GO) test -json $(UNIT_FLAGS) $(PKGS) | bin/testreport -o $(UNIT_JSON)

bin/testreport: internal/testreport/main.go
	$(GO) build -o $@ ./internal/testreport

# deploy/ is a module of its own (kustomize, the Kubernetes API types and the
# compose-spec loader stay out of sluice's go.mod); its tests run the sluice
# binary as processes, so the race detector would only slow their build.
DEPLOY_TEST_FLAGS ?= -count=1 -timeout 20m
test-deploy:
	SLUICE_TEST_SERVICES='zookeeper redis versitygw' scripts/with-services.sh \
		bash -c 'cd deploy && $(GO) test $(DEPLOY_TEST_FLAGS) ./...'

# make bench: the Go benchmarks, then scripts/bench.sh runs every `sluice
# bench` scenario against its baseline with ZooKeeper, Redis and versitygw
# up; each appends its row to BENCH_RESULTS, a Markdown table printed at
# the end, with the load average before and after (the machine is shared).
BENCH_RESULTS ?= bench-results.md
bench: build
	scripts/with-services.sh $(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	@printf '# sluice bench, %s\n\nLoad average before: %s\n' "$$(date -u +%FT%TZ)" "$$(cut -d' ' -f1-3 /proc/loadavg)" >$(BENCH_RESULTS)
	SLUICE_TEST_SERVICES='zookeeper redis versitygw' BENCH_RESULTS=$(abspath $(BENCH_RESULTS)) scripts/with-services.sh scripts/bench.sh
	@printf '\nLoad average after: %s\n' "$$(cut -d' ' -f1-3 /proc/loadavg)" >>$(BENCH_RESULTS)
	@echo; cat $(BENCH_RESULTS)

# make lint: go vet and gofmt on both modules, then golangci-lint with
# .golangci.yml (scripts/golangci-lint.sh builds the pinned version into
# the tool cache on first use, a few minutes on a cold module cache).
GOLANGCI_LINT ?= $(CURDIR)/scripts/golangci-lint.sh
lint:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then \
		echo 'gofmt: these files need gofmt -w:'; echo "$$out"; exit 1; \
	fi
	$(GOLANGCI_LINT) run ./...
	cd deploy && $(GOLANGCI_LINT) run ./...

# Fuzz targets as package:Target: every Fuzz function of the tree, the
# decoders of what comes from disk and from peers among them (producer
# snapshots, the leader-epoch checkpoint, __consumer_offsets records, the
# in-process coordinator's snapshot and journal, archive objects). Each runs for a count of executions, not a
# duration: go1.26's fuzz coordinator can fail a -fuzztime=<duration> run with
# "context deadline exceeded" at the deadline when workers are starved (Go
# issue 75804, fixed in 1.27), and a count has no deadline to race.
FUZZ_EXECS ?= 100000
FUZZ_TARGETS ?= ./recordbatch:FuzzDecodeBatch ./recordbatch:FuzzValidateBatch ./api:FuzzDecodeCursor \
	./gateway:FuzzScanRecord ./gateway:FuzzParseJSONBody ./gateway:FuzzParseNDJSON ./gateway:FuzzValidJSON \
	./gateway:FuzzQueryParams ./gateway:FuzzCreditFrame ./gateway:FuzzGroupFrame ./tier:FuzzDecodeIndex \
	./commitlog:FuzzDecodeProducerSnapshot ./commitlog:FuzzDecodeEpochs ./offsets:FuzzApplyRecord \
	./coord:FuzzLoadTree ./sink:FuzzDecodeArchiveObject ./sink:FuzzArchiveRoundTrip

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $$t"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZ_EXECS)x "$${t%%:*}"; \
	done

# The dashboard's browser test, which also writes its screenshots to
# docs/screenshots (it waits longer then, so the charts have a history).
screenshots:
	SLUICE_TEST_SERVICES=chromium SLUICE_SCREENSHOTS=$(CURDIR)/docs/screenshots \
		scripts/with-services.sh $(GO) test -count=1 -run '^TestDashboard$$' ./web/

services-up:
	scripts/services.sh install
	scripts/services.sh start
	@echo 'services are up: source .services/env'

services-down:
	scripts/services.sh stop

services-status:
	scripts/services.sh status
