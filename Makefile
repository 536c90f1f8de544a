# krole: build, test, bench, demo, lint.
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 9m
# The library packages: what `make test-race` runs with the race detector.
LIBPKGS ?= ./codec/... ./rolestate/... ./fencing/... ./view/... ./processor/... ./election/...
FUZZTIME ?= 20s

.PHONY: all build test test-race fuzz bench lint check fmt dev demo clean

all: lint test build

build: ## the binary, bin/krole
	$(GO) build -o bin/krole .

test: ## every test; integration tests start an embedded Kafka-protocol cluster (or use KROLE_BROKERS)
	$(GO) test -count=1 -timeout $(TIMEOUT) $(PKGS)

test-race: ## the library packages' tests with the race detector
	$(GO) test -race -count=1 -timeout $(TIMEOUT) $(LIBPKGS)

fuzz: ## a short fuzz run of the codec's decoder (FUZZTIME, default 20s)
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./codec

bench: ## the Go benchmarks (see docs/BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint: ## go vet, a gofmt check and staticcheck (the version pinned by go.mod's tool line)
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck $(PKGS)

check: lint test test-race fuzz ## everything CI runs, in CI's order

fmt:
	gofmt -w $$(git ls-files '*.go')

dev: ## an embedded cluster on 127.0.0.1:9092
	$(GO) run . dev

demo: ## three members of a role, a failover and a handover, narrated
	$(GO) run . demo

clean:
	rm -rf bin
