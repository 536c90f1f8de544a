# krole: build, test, bench, demo, lint.
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 9m

.PHONY: all build test test-race bench lint fmt dev demo clean

all: lint test build

build: ## the binary, bin/krole
	$(GO) build -o bin/krole .

test: ## every test; integration tests start an embedded Kafka-protocol cluster (or use KROLE_BROKERS)
	$(GO) test -count=1 -timeout $(TIMEOUT) $(PKGS)

test-race:
	$(GO) test -race -count=1 -timeout $(TIMEOUT) $(PKGS)

bench: ## the Go benchmarks (see docs/BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint: ## go vet and a gofmt check
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go')

dev: ## an embedded cluster on 127.0.0.1:9092
	$(GO) run . dev

demo: ## three members of a role, a failover and a handover, narrated
	$(GO) run . demo

clean:
	rm -rf bin
