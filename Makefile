# Sluice: the build front door. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go

TEST_FLAGS ?= -race -count=1 -timeout 40m
PKGS ?= ./...

.PHONY: help build run test test-deploy bench lint fuzz screenshots services-up services-down services-status

help:
	@echo 'make build          go build -o bin/sluice ./cmd/sluice'
	@echo 'make run            build, then bin/sluice dev (reads SLUICE_ADDR, SLUICE_DATA)'
	@echo 'make test           install + start ZooKeeper, Redis, versitygw, Chromium; go test; stop them'
	@echo 'make test-deploy    the deploy/ module: manifests, compose file, dashboard, the compose stack as processes'
	@echo 'make bench          Go benchmarks (with the services up), then bin/sluice bench'
	@echo 'make lint           go vet and gofmt'
	@echo 'make fuzz           each fuzz target in FUZZ_TARGETS for FUZZ_EXECS executions'
	@echo 'make screenshots    the dashboard test in Chromium, saving each page to docs/screenshots'
	@echo 'make services-up    install + start the services; then: source .services/env'
	@echo 'make services-down  stop them'

build:
	$(GO) build -o bin/sluice ./cmd/sluice

# SLUICE_ADDR and SLUICE_DATA, when set, reach the binary through the environment.
run: build
	./bin/sluice dev

test:
	scripts/with-services.sh $(GO) test $(TEST_FLAGS) $(PKGS)
	$(MAKE) test-deploy

# deploy/ is a module of its own (kustomize, the Kubernetes API types and the
# compose-spec loader stay out of sluice's go.mod); its tests run the sluice
# binary as processes, so the race detector would only slow their build.
DEPLOY_TEST_FLAGS ?= -count=1 -timeout 20m
test-deploy:
	SLUICE_TEST_SERVICES='zookeeper redis versitygw' scripts/with-services.sh \
		bash -c 'cd deploy && $(GO) test $(DEPLOY_TEST_FLAGS) ./...'

bench: build
	scripts/with-services.sh $(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	@echo '== produce through the gateway vs a plain append-to-file HTTP server (acks=1, RF=1)'
	./bin/sluice bench produce
	@echo '== acks=all on replication factor 3 vs acks=1 on replication factor 1, three brokers'
	./bin/sluice bench produce --brokers 3 --replication-factor 3 --acks all --baseline rf1
	@echo '== consume from offset 0: all in the object store (a local directory here) vs local disk'
	./bin/sluice bench consume --cold --raw
	@echo '== consume through a consumer group (cursors, commits beside the polls) vs plain partition fetches, RF=3'
	./bin/sluice bench consume --group --brokers 3 --replication-factor 3 --records 200000 --rounds 5
	@echo '== sinks: Redis vs XADD pipelines of the same depth (and redis-benchmark); S3 vs plain PUTs of the same objects'
	SLUICE_TEST_SERVICES='redis versitygw' scripts/with-services.sh bash -c '\
		./bin/sluice bench sink redis --redis redis://$$SLUICE_TEST_REDIS/0 && \
		SLUICE_S3_SECRET_KEY=$$SLUICE_TEST_S3_SECRET_KEY ./bin/sluice bench sink s3 --size 1000 --records 100000 --max-records 5000 \
			--s3-endpoint $$SLUICE_TEST_S3_ENDPOINT --s3-bucket $$SLUICE_TEST_S3_BUCKET --s3-access-key $$SLUICE_TEST_S3_ACCESS_KEY --s3-prefix bench'

lint:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then \
		echo 'gofmt: these files need gofmt -w:'; echo "$$out"; exit 1; \
	fi

# Fuzz targets as package:Target. Each runs for a count of executions, not a
# duration: go1.26's fuzz coordinator can fail a -fuzztime=<duration> run with
# "context deadline exceeded" at the deadline when workers are starved (Go
# issue 75804, fixed in 1.27), and a count has no deadline to race.
FUZZ_EXECS ?= 100000
FUZZ_TARGETS ?= ./api:FuzzDecodeBatch ./api:FuzzValidateBatch ./api:FuzzDecodeCursor ./gateway:FuzzScanRecord ./gateway:FuzzParseJSONBody ./gateway:FuzzParseNDJSON ./gateway:FuzzQueryParams ./gateway:FuzzCreditFrame ./gateway:FuzzGroupFrame ./tier:FuzzDecodeIndex

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
