# towerd — see README.md. Every target works from a fresh Debian machine with Go.
GO       ?= go
BIN      := bin/towerd
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
# make run serves here: loopback, unprivileged, built-in defaults.
RUN_LISTEN ?= 127.0.0.1:1053
ARGS     ?=

.PHONY: all build run test test-deps vet fmt-check clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/towerd

# Build and serve in the foreground with the built-in defaults (consul. to
# 127.0.0.1:8600, everything else to the system's resolvers). Extra flags:
# make run ARGS='-upstream 127.0.0.1:5300'
run: build
	@echo "towerd on $(RUN_LISTEN): try  dig @$(firstword $(subst :, ,$(RUN_LISTEN))) -p $(lastword $(subst :, ,$(RUN_LISTEN))) example.org"
	./$(BIN) -config '' -listen $(RUN_LISTEN) $(ARGS)

# Installs what the tests need (dig, ...), then vets and runs every test with
# the race detector.
test: test-deps fmt-check vet
	$(GO) test -race -count=1 -timeout 15m ./...

test-deps:
	@test/install-deps.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin
