# towerd — see README.md. Every target works from a fresh Debian machine with Go.
GO       ?= go
BIN      := bin/towerd
# The version is the git tag (v0.x.y; git describe adds -N-gHASH after it).
# A clone without tags (CI's shallow ones) gets the next release named in
# VERSION, marked as a pre-release of it: v0.1.0~git1a2b3c4 (~ sorts before
# the release for dpkg too). See "Versions and packaging" in the README.
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || \
	echo "v$$(cat VERSION)~git$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo .dirty)")
LDFLAGS  := -X main.version=$(VERSION)
# make run serves here: loopback, unprivileged, built-in defaults. These
# and ARGS are documented in docs/development.md ("make run").
RUN_LISTEN ?= 127.0.0.1:1053
# ... and its admin server (/metrics, /stats; read by `towerd stats`) here.
RUN_ADMIN ?= 127.0.0.1:9253
# ... and its control socket (reload, flush, cache, lookup, log-queries) here:
# a path the user running make can create, unlike /run/towerd/control.sock.
RUN_CONTROL ?= bin/control.sock
# ... and saves its cache here on stop ('' = not saved; see run below).
RUN_STATE_DIR ?=
ARGS     ?=

.PHONY: all build run test test-stress test-deps consul-agent coredns fleet-scale vet fmt-check tree-check fuzz bench clean deb deb-check version

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/towerd

# Build and serve in the foreground with the built-in defaults (consul. to
# 127.0.0.1:8600, everything else to the system's resolvers). Extra flags:
# make run ARGS='-upstream 127.0.0.1:5300'
# The cache is not saved unless RUN_STATE_DIR names a directory: each run
# starts cold, as a first look should (and as the tests of make run expect).
# make run RUN_STATE_DIR=bin/state keeps it across runs, without root.
run: build
	@if [ -n "$(RUN_STATE_DIR)" ]; then mkdir -p "$(RUN_STATE_DIR)"; fi
	@echo "towerd on $(RUN_LISTEN): try  dig @$(firstword $(subst :, ,$(RUN_LISTEN))) -p $(lastword $(subst :, ,$(RUN_LISTEN))) example.org"
	@echo "figures:   ./$(BIN) stats -admin $(RUN_ADMIN)   (or curl http://$(RUN_ADMIN)/metrics)"
	@echo "control:   ./$(BIN) lookup example.org -control $(RUN_CONTROL)   (also reload, flush, cache list, log-queries)"
	./$(BIN) -config '' -listen $(RUN_LISTEN) -admin $(RUN_ADMIN) -control '$(RUN_CONTROL)' -state-dir '$(RUN_STATE_DIR)' $(ARGS)

# Installs what the tests need (dig, ...), then vets and runs every test with
# the race detector.
test: tree-check test-deps consul-agent fmt-check vet fuzz deb-check
	$(GO) test -race -count=1 -timeout 15m ./...

# Issue 33, not part of make test: the whole suite (go test -race ./...)
# beside STRESS_HOGS CPU hogs (stress-ng, which test-deps installs), so a
# test that leans on the machine's speed fails here, before it flakes in
# CI. Run it before a change is merged; docs/development.md says more. The
# hogs stop with the tests, and by themselves after STRESS_TIMEOUT.
STRESS_HOGS ?= 2
STRESS_TIMEOUT ?= 60m

test-stress: test-deps consul-agent
	@stress-ng --cpu $(STRESS_HOGS) --timeout $(STRESS_TIMEOUT) --quiet & hogs=$$!; \
	echo "go test -race ./... beside $(STRESS_HOGS) CPU hogs (stress-ng pid $$hogs)"; \
	$(GO) test -race -count=1 -timeout 30m ./...; status=$$?; \
	kill $$hogs 2>/dev/null; wait $$hogs 2>/dev/null; exit $$status

test-deps:
	@test/install-deps.sh

# The real Consul agent (v1.14.11, MPL-2.0) the Consul tests start, built
# from its Go module by the separate module in test/consulagent: about ten
# minutes on 2 cores with an empty Go build cache, then reused (rebuilt only
# when missing).
CONSUL_AGENT := test/consulagent/bin/consul

consul-agent: $(CONSUL_AGENT)

$(CONSUL_AGENT):
	cd test/consulagent && $(GO) build -trimpath -o bin/consul .

# CoreDNS v1.15.0 (Apache-2.0) with only the plugins the bench's dot
# scenario configures (bind, errors, cache, forward), built from its Go
# module by the separate module in test/corednsbuild: about a minute with
# an empty Go build cache, then reused (rebuilt only when missing). Only
# make bench uses it; make test does not build it.
COREDNS := test/corednsbuild/bin/coredns

coredns: $(COREDNS)

$(COREDNS):
	cd test/corednsbuild && $(GO) build -trimpath -o bin/coredns .

# Each fuzz target for FUZZTIME (no -race: the fuzzer's own instrumentation
# is enough, and it is several times faster). A crash is written to the
# package's testdata/fuzz and fails the run. The budget is a count of
# executions, not a duration: with a duration Go 1.26's fuzz coordinator can
# fail a clean run with "context deadline exceeded" when the deadline races a
# busy worker (golang/go#75804, fixed in Go 1.27). 100000x is about 5-10 s
# per target here. Longer: make fuzz FUZZTIME=10m (or 5000000x).
FUZZTIME ?= 100000x
# FuzzTCPStream runs a real connection loop per input, whose end is an idle
# timeout of a few milliseconds: about 350 inputs a second, so its own,
# smaller budget (about 30 s).
FUZZTIME_TCP ?= 10000x

# Every fuzz target in the tree, found by test/fuzz.sh with go test -list.
fuzz:
	GO='$(GO)' FUZZTIME='$(FUZZTIME)' FUZZTIME_TCP='$(FUZZTIME_TCP)' test/fuzz.sh

vet:
	$(GO) vet ./...

# The tree tracks sources, not build output: a tracked file that git sees
# as binary, or one over 1 MiB, fails the run (issue 26: an 18.7 MB binary
# sat at the root for weeks).
TREE_MAX_BYTES ?= 1048576

tree-check:
	@bad="$$(git ls-files --eol 2>/dev/null | awk '$$1 == "i/-text" { sub(/^[^\t]*\t/, ""); print "binary: " $$0 }')"; \
	big="$$(git ls-files -z 2>/dev/null | xargs -0 -r stat -c '%s %n' 2>/dev/null | \
		awk -v max=$(TREE_MAX_BYTES) '$$1 > max { print "over " max " bytes: " $$2 " (" $$1 ")" }')"; \
	if [ -n "$$bad$$big" ]; then echo "tracked files that are build output or too big:"; \
		printf '%s\n' "$$bad" "$$big" | sed '/^$$/d'; exit 1; fi

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Issue 6, not part of make test: the Go benchmarks of the hit path, then
# towerd beside dnsmasq and unbound on loopback (about 20 minutes; results
# and how to read them in docs/benchmarks.md). More: make bench BENCH_ARGS='-rounds 3'
# or fewer: BENCH_ARGS='-scenarios latency,memory' (all ten by default;
# scenario 10, search, needs root and takes the Consul agent of make test;
# scenario 12, dot, takes the CoreDNS of make coredns).
BENCH_ARGS ?=

bench: build consul-agent coredns
	@test/bench/install-peers.sh
	$(GO) test -run='^$$' -bench=. -benchmem ./cache ./resolver ./resolver/dnssec ./upstream
	$(GO) build -o bin/towerd-bench ./test/bench
	./bin/towerd-bench -towerd $(BIN) $(BENCH_ARGS)

# Issue 24 at scale, not part of make test (a few minutes): the Consul fleet
# test with a round-robin over FLEET_SERVICES services beside the 80 and 200
# of make test, against one server and six client agents. Figures and how to
# read them in docs/fleet-scale.md.
FLEET_SERVICES ?= 2000

fleet-scale: consul-agent
	TOWERD_FLEET_SERVICES=$(FLEET_SERVICES) $(GO) test -count=1 -timeout 30m -run '^TestConsulFleetAdmission$$' -v ./test/

# The Debian package, built with dpkg-deb from a tree cmd/towerd/dist lays
# out (no debhelper): bin/towerd_<version>_<arch>.deb. The binary is static
# (CGO_ENABLED=0), so the package depends on nothing. Debian's version is
# VERSION without the v, git describe's -N-gHASH as +N.gHASH:
# v0.1.0 -> 0.1.0, v0.1.0-3-g1a2b3c4 -> 0.1.0+3.g1a2b3c4.
DEB_VERSION := $(shell echo '$(VERSION)' | sed -e 's/^v//' -e 's/-/+/' -e 's/-/./g')
DEB_ARCH    ?= $(shell $(GO) env GOARCH | sed -e 's/^386$$/i386/' -e 's/^arm$$/armhf/' -e 's/^ppc64le$$/ppc64el/')
# Where the package and its tree go (the tests build into a temp dir).
DEB_DIR     ?= bin
DEB         := $(DEB_DIR)/towerd_$(DEB_VERSION)_$(DEB_ARCH).deb
# File times and the changelog date: the commit's, so a commit builds the same package.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || date +%s)

deb:
	rm -rf $(DEB_DIR)/deb && mkdir -p $(DEB_DIR)/deb
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o $(DEB_DIR)/deb/towerd ./cmd/towerd
	$(GO) run ./cmd/towerd/dist -binary $(DEB_DIR)/deb/towerd -out $(DEB_DIR)/deb/root \
		-version '$(DEB_VERSION)' -arch '$(DEB_ARCH)' -source-date-epoch '$(SOURCE_DATE_EPOCH)'
	SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' dpkg-deb --root-owner-group -Zxz --build $(DEB_DIR)/deb/root $(DEB)
	@echo "built $(DEB)"

# Prints towerd's version and the package's, as make deb would use them.
version:
	@echo '$(VERSION) $(DEB_VERSION)'


# lintian on the package (about 6 s): errors and warnings fail, infos are
# shown. The tags accepted are overridden, each with its reason, in
# cmd/towerd/dist/debian/lintian-overrides. A newer lintian with new
# warnings: LINTIAN_FAIL_ON=error while they are looked at.
LINTIAN_FAIL_ON ?= error,warning

deb-check: deb
	@command -v lintian >/dev/null 2>&1 || test/install-deps.sh
	lintian --fail-on $(LINTIAN_FAIL_ON) --display-info $(DEB)

clean:
	rm -rf bin
