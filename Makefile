# krole: build, test, bench, demo, lint.
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 9m
# The library packages, and internal/ctxcall that fencing runs on: what
# `make test-race` runs with the race detector.
LIBPKGS ?= ./codec/... ./rolestate/... ./fencing/... ./view/... ./processor/... ./election/... ./internal/ctxcall/... ./sqlfence/...
# A count of executions, not a duration: at the end of a duration Go's
# fuzz coordinator can report its own deadline as a failure under load
# (go.dev/issue/75804, fixed in Go 1.27). About 20 s each here.
FUZZTIME ?= 400000x
# The version matrix: the integration packages whose requests differ per
# broker version, run once per table of internal/testcluster RealBrokers
# (KROLE_TEST_VERSIONS caps every embedded cluster they start).
VERSIONS     ?= kafka-3.0 kafka-4.0 redpanda
VERSIONPKGS  ?= ./fencing/... ./view/... ./processor/stream/...
PIPEPKGS     ?= ./fencing/... ./processor/... ./election/... ./examples/...
# The chaos suite: how long its faults run, its seed (a number, or random), the go test timeout.
# (The 30-second run inside `make test` replays one fixed seed, and a mass failover of 1000 roles follows it; see internal/chaos/chaos_test.go.)
CHAOS_DURATION ?= 5m
CHAOS_SEED ?= random
# The number of roles, every member a candidate for each (empty: the suite's default, 40).
CHAOS_ROLES ?=
CHAOS_PIPELINE ?=
# massfailover: one member holding every role (CHAOS_ROLES, default 1000) SIGKILLed, CHAOS_CANDIDATES (default 2) candidates.
CHAOS_SCENARIO ?=
CHAOS_CANDIDATES ?=
CHAOS_TIMEOUT ?= 20m

# The Debian packages the tests use: chromium (the page test of krole
# serve) and kcat (an interop test) skip without theirs; postgresql and
# mariadb-server (sqlfence's tests start their own servers) fail without.
DEBS ?= chromium kcat postgresql mariadb-server

.PHONY: all build deps test test-race test-versions test-pipeline fuzz bench bench-compare lint check fmt dev demo clean chaos

all: lint test build

build: ## the binary, bin/krole
	$(GO) build -o bin/krole .

deps: ## apt-get install those of DEBS that are missing (as root, on Debian)
	@missing=""; for p in $(DEBS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all of $(DEBS) installed"; exit 0; fi; \
	echo "deps: installing$$missing"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null

test: ## every test; integration tests start an embedded Kafka-protocol cluster (or use KROLE_BROKERS), sqlfence's a PostgreSQL and a MariaDB (see deps)
	$(GO) test -count=1 -timeout $(TIMEOUT) $(PKGS)

test-race: ## the library packages' tests with the race detector
	$(GO) test -race -count=1 -timeout $(TIMEOUT) $(LIBPKGS)

test-versions: ## VERSIONPKGS once per broker table (KROLE_TEST_VERSIONS=kafka-3.0, kafka-4.0, redpanda): as against those brokers' request versions
	@set -e; for v in $(VERSIONS); do echo "== KROLE_TEST_VERSIONS=$$v"; KROLE_TEST_VERSIONS=$$v $(GO) test -count=1 -timeout $(TIMEOUT) $(VERSIONPKGS); done

test-pipeline: ## PIPEPKGS with KROLE_TEST_PIPELINE=on: the succession suites with every commit that can go behind its produce pipelined
	KROLE_TEST_PIPELINE=on $(GO) test -count=1 -timeout $(TIMEOUT) $(PIPEPKGS)

fuzz: ## a short fuzz run of the codec's decoder, and of its fast paths against the general one (FUZZTIME executions each)
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./codec
	$(GO) test -run '^$$' -fuzz '^FuzzFastDecode$$' -fuzztime $(FUZZTIME) ./codec

chaos: ## the chaos suite for CHAOS_DURATION (default 5m; raise CHAOS_TIMEOUT past 20m for runs over 10m) with seed CHAOS_SEED (default random); fails on any violation
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) CHAOS_ROLES=$(CHAOS_ROLES) CHAOS_PIPELINE=$(CHAOS_PIPELINE) CHAOS_SCENARIO=$(CHAOS_SCENARIO) CHAOS_CANDIDATES=$(CHAOS_CANDIDATES) $(GO) test -count=1 -v -run '^TestChaos$$' -timeout $(CHAOS_TIMEOUT) ./internal/chaos

bench: ## the Go benchmarks (see docs/BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# bench-compare: krole bench against etcd's election (bench/), ZooKeeper's
# recipe (bench/zk) and a Kafka consumer group (bench/kgroup), each a module
# of its own, same scenarios, same machine, same run. BENCH_TTL is etcd's session
# TTL and krole's lease; etcd keeps alive every TTL/3, so krole runs with
# --heartbeat-interval TTL/3 as well as with its default (lease/5).
BENCH_TTL     ?= 3s
BENCH_RI      ?= 1s
BENCH_ROUNDS  ?= 30
BENCH_FROUNDS ?= 20
BENCH_MEMBERS ?= 3
BENCH_OUT     ?= bin/bench-compare
BENCH_CHART   ?= docs/bench-compare.svg

bench-compare: build ## krole bench and its peers (etcd, ZooKeeper, a Kafka consumer group), side by side, with ratios and a chart (BENCH_CHART)
	@command -v java >/dev/null 2>&1 && ls /usr/share/java/zookeeper*.jar >/dev/null 2>&1 || \
		{ echo "bench-compare: installing zookeeper from Debian"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zookeeper >/dev/null; }
	cd bench && GOFLAGS=-mod=mod $(GO) build -o ../bin/etcd-election-bench .
	cd bench/zk && GOFLAGS=-mod=mod $(GO) build -o ../../bin/zookeeper-election-bench .
	cd bench/kgroup && GOFLAGS=-mod=mod $(GO) build -o ../../bin/kgroup-election-bench .
	mkdir -p $(BENCH_OUT)
	bin/etcd-election-bench acquire  --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) --label "etcd acquire, open session" -o json > $(BENCH_OUT)/etcd-acquire.json
	bin/etcd-election-bench acquire  --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) --with-session --label "etcd acquire, new session" -o json > $(BENCH_OUT)/etcd-acquire-session.json
	bin/krole bench acquire --rounds $(BENCH_ROUNDS) --lease-duration $(BENCH_TTL) --label "krole acquire, new member" -o json > $(BENCH_OUT)/krole-acquire.json
	bin/krole bench acquire --running --rounds $(BENCH_ROUNDS) --lease-duration $(BENCH_TTL) --label "krole acquire, running member" -o json > $(BENCH_OUT)/krole-acquire-running.json
	bin/etcd-election-bench handover --members $(BENCH_MEMBERS) --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/etcd-handover.json
	bin/krole bench handover --members $(BENCH_MEMBERS) --rounds $(BENCH_ROUNDS) --lease-duration $(BENCH_TTL) -o json > $(BENCH_OUT)/krole-handover.json
	bin/krole bench handover --lock --members $(BENCH_MEMBERS) --rounds $(BENCH_ROUNDS) --lease-duration $(BENCH_TTL) \
		--label "krole handover, no command" -o json > $(BENCH_OUT)/krole-handover-lock.json
	bin/etcd-election-bench failover --members $(BENCH_MEMBERS) --rounds $(BENCH_FROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/etcd-failover.json
	bin/krole bench failover --members $(BENCH_MEMBERS) --rounds $(BENCH_FROUNDS) --lease-duration $(BENCH_TTL) --heartbeat-interval $(BENCH_RI) \
		--label "krole failover RI=TTL/3" -o json > $(BENCH_OUT)/krole-failover.json
	bin/krole bench failover --members $(BENCH_MEMBERS) --rounds $(BENCH_FROUNDS) --lease-duration $(BENCH_TTL) \
		--label "krole failover default RI" -o json > $(BENCH_OUT)/krole-failover-default.json
	bin/zookeeper-election-bench acquire --start-zookeeper --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/zookeeper-acquire.json
	bin/zookeeper-election-bench handover --start-zookeeper --members $(BENCH_MEMBERS) --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/zookeeper-handover.json
	bin/zookeeper-election-bench failover --start-zookeeper --members $(BENCH_MEMBERS) --rounds $(BENCH_FROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/zookeeper-failover.json
	bin/kgroup-election-bench acquire --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/kgroup-acquire.json
	bin/kgroup-election-bench handover --members $(BENCH_MEMBERS) --rounds $(BENCH_ROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/kgroup-handover.json
	bin/kgroup-election-bench failover --members $(BENCH_MEMBERS) --rounds $(BENCH_FROUNDS) --ttl $(BENCH_TTL) -o json > $(BENCH_OUT)/kgroup-failover.json
	bin/krole bench compare --chart $(BENCH_CHART) \
		$(BENCH_OUT)/krole-acquire.json $(BENCH_OUT)/krole-acquire-running.json $(BENCH_OUT)/etcd-acquire-session.json $(BENCH_OUT)/etcd-acquire.json \
		$(BENCH_OUT)/zookeeper-acquire.json $(BENCH_OUT)/kgroup-acquire.json \
		$(BENCH_OUT)/krole-handover.json $(BENCH_OUT)/krole-handover-lock.json $(BENCH_OUT)/etcd-handover.json $(BENCH_OUT)/zookeeper-handover.json $(BENCH_OUT)/kgroup-handover.json \
		$(BENCH_OUT)/krole-failover.json $(BENCH_OUT)/krole-failover-default.json $(BENCH_OUT)/etcd-failover.json $(BENCH_OUT)/zookeeper-failover.json $(BENCH_OUT)/kgroup-failover.json

lint: ## go vet, a gofmt check and staticcheck (the version pinned by go.mod's tool line)
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck $(PKGS)

check: lint test test-race test-versions test-pipeline fuzz ## everything CI runs, in CI's order

fmt:
	gofmt -w $$(git ls-files '*.go')

dev: ## an embedded cluster on 127.0.0.1:9092
	$(GO) run . dev

demo: ## three members of a role, a failover and a handover, narrated
	$(GO) run . demo

clean:
	rm -rf bin
