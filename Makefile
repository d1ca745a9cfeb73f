# Sluice build. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
BUILD := build
SDK_MOD := github.com/tetratelabs/proxy-wasm-go-sdk
# The wasm is built against a copy of the SDK with our bridge dropped in;
# see filter/bridge/doc.go for why the published SDK cannot be used as is.
WASM_ENV := GOOS=wasip1 GOARCH=wasm
WASM_FLAGS := -modfile=$(BUILD)/go.wasm.mod -tags sluice_bridge -buildmode=c-shared -trimpath
BRIDGE := $(wildcard filter/bridge/*.go)
GO_SOURCES := $(shell find filter limiter breaker -name '*.go' -not -name '*_test.go' 2>/dev/null)
EXAMPLE ?=
CONCURRENCY ?= 2
PROFILE ?= envoy-1.39
ifeq ($(EXAMPLE),)
RUN_CONFIG := envoy/envoy.yaml
else
RUN_CONFIG := examples/$(EXAMPLE)/envoy.yaml
endif

.PHONY: help build test run lint clean bench oci push fuzz

help:
	@echo "make build   - build/sluice.wasm and build/noop.wasm (standard Go + bridge)"
	@echo "make run     - build, start the demo backend and limits service, serve envoy/envoy.yaml (or EXAMPLE=<name>) on our host"
	@echo "make test    - every test: native, wasm in our host, end-to-end with redis-server and webdis"
	@echo "make lint    - gofmt, go vet (native and wasm), go mod tidy leaves no diff"
	@echo "make bench   - BENCHMARKS.md and its plot (BENCH_QUICK=1 for the short CI mode)"
	@echo "make fuzz    - every fuzz target for FUZZTIME (default 20s)"
	@echo "make oci     - OCI image layouts under build/oci"
	@echo "make clean"

build: $(BUILD)/sluice.wasm $(BUILD)/noop.wasm

$(BUILD)/sdk/.stamp: go.mod go.sum $(BRIDGE)
	rm -rf $(BUILD)/sdk
	mkdir -p $(BUILD)
	$(GO) mod download $(SDK_MOD)
	cp -R "$$($(GO) list -m -f '{{.Dir}}' $(SDK_MOD))" $(BUILD)/sdk
	chmod -R u+w $(BUILD)/sdk
	rm $(BUILD)/sdk/proxywasm/internal/abi_hostcalls_mock.go
	find $(BUILD)/sdk -name '*_test.go' -delete
	cp $(BRIDGE) $(BUILD)/sdk/proxywasm/internal/
	{ cat go.mod; echo; echo "replace $(SDK_MOD) => ./$(BUILD)/sdk"; } > $(BUILD)/go.wasm.mod
	cp go.sum $(BUILD)/go.wasm.sum
	touch $@

$(BUILD)/sluice.wasm: $(BUILD)/sdk/.stamp $(GO_SOURCES) filter/cmd/sluice/main.go
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $@ ./filter/cmd/sluice
	$(GO) run ./tools/wasmcheck $@

$(BUILD)/noop.wasm: $(BUILD)/sdk/.stamp e2e/noop/main.go
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $@ ./e2e/noop
	$(GO) run ./tools/wasmcheck $@

# Every test: native, wasm in our host, end to end against real servers.
test: build
	$(GO) test -count=1 -timeout 40m ./...

run: build
	$(GO) build -o $(BUILD)/sluice-envoy ./e2e/cmd/sluice-envoy
	$(GO) build -o $(BUILD)/echo-backend ./e2e/cmd/echo-backend
	$(GO) build -o $(BUILD)/limits-server ./e2e/cmd/limits-server
	$(BUILD)/echo-backend -addr 127.0.0.1:8081 & backend=$$!; \
	$(BUILD)/limits-server -addr 127.0.0.1:8082 & limits=$$!; \
	trap 'kill $$backend $$limits' EXIT; \
	$(BUILD)/sluice-envoy -c $(RUN_CONFIG) --concurrency $(CONCURRENCY) --wasm-profile $(PROFILE)

lint: $(BUILD)/sdk/.stamp
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(WASM_ENV) $(GO) vet -modfile=$(BUILD)/go.wasm.mod -tags sluice_bridge ./filter/cmd/sluice ./e2e/noop
	@# The bridge is vetted where it compiles, inside the SDK copy; the SDK's
	@# own reflect.SliceHeader use is not ours to fix, hence -unsafeptr=false.
	$(WASM_ENV) $(GO) vet -modfile=$(BUILD)/go.wasm.mod -tags sluice_bridge -unsafeptr=false $(SDK_MOD)/proxywasm/internal
	@tmp=$$(mktemp -d); cp go.mod go.sum "$$tmp"/; \
	$(GO) mod tidy; \
	if ! diff -q go.mod "$$tmp"/go.mod >/dev/null || ! diff -q go.sum "$$tmp"/go.sum >/dev/null; then \
		diff -u "$$tmp"/go.mod go.mod || true; cp "$$tmp"/go.mod "$$tmp"/go.sum .; \
		echo "go mod tidy changes go.mod/go.sum"; exit 1; fi

# make bench: one command, one report (BENCHMARKS.md and its plot).
# BENCH_QUICK=1 is the short mode CI runs to prove the harness works; it
# asserts no timings.
BENCH_COUNT := $(if $(BENCH_QUICK),1,5)
BENCH_TIME := $(if $(BENCH_QUICK),-benchtime 20ms,)
bench: build
	@mkdir -p $(BUILD)
	SLUICE_BENCH=1 SLUICE_BENCH_OUT=$(CURDIR)/$(BUILD)/bench-lifecycle.md \
		$(GO) test -count=1 -timeout 20m -run '^TestLifecycleReport$$' ./e2e/
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) $(BENCH_TIME) ./limiter/ ./breaker/ \
		| tee $(BUILD)/bench-native.txt \
		| $(GO) run ./tools/benchfmt -baseline XTimeRate,XTimeRateAllowN > $(BUILD)/bench-native.md
	SLUICE_BENCH=1 SLUICE_BENCH_OUT_DISTRIBUTED=$(CURDIR)/$(BUILD)/bench-distributed.md \
		SLUICE_BENCH_SERIES_DISTRIBUTED=$(CURDIR)/$(BUILD)/bench-distributed-series.json \
		$(GO) test -count=1 -timeout 20m -run '^TestBenchDistributed$$' ./e2e/
	$(GO) run ./tools/benchreport -in $(BUILD)/bench-distributed-series.json -out BENCHMARKS.png
	{ \
	  echo "# Benchmarks"; echo; \
	  echo "Produced by \`make bench$(if $(BENCH_QUICK), BENCH_QUICK=1)\` on $$(nproc) cores, $$(date -u +%Y-%m-%dT%H:%MZ); load average at the end: $$(cut -d' ' -f1-3 /proc/loadavg)."; \
	  echo "Ratios are measured within one run, so they carry less noise than the absolute figures."; echo; \
	  echo "## Filter cost in our host"; echo; \
	  echo "Per-request lifecycle (context create, request headers, upstream, response headers, log, done, delete) on one worker, interleaved with the no-op SDK filter built the same way."; echo; \
	  cat $(BUILD)/bench-lifecycle.md; echo; \
	  echo "## Native cores"; echo; \
	  echo "ns per decision against golang.org/x/time/rate's AllowN in the same run."; echo; \
	  cat $(BUILD)/bench-native.md; echo; \
	  echo "## Distributed"; echo; \
	  echo "![admitted per second against the limit](BENCHMARKS.png)"; echo; \
	  sed '1{/^#/d}' $(BUILD)/bench-distributed.md; echo; \
	  if [ -f $(BUILD)/soak.md ]; then echo "## Soak and memory"; echo; cat $(BUILD)/soak.md; echo; fi; \
	  if [ -f $(BUILD)/faults.md ]; then echo "## Fault matrix"; echo; cat $(BUILD)/faults.md; echo; fi; \
	} > BENCHMARKS.md
	@echo "wrote BENCHMARKS.md and BENCHMARKS.png"

# Every go test -fuzz target for FUZZTIME each (default 20s).
fuzz:
	bash .ci/fuzz

TAG ?= dev
# Both image variants as OCI layouts; reproducible for the same wasm.
oci: $(BUILD)/sluice.wasm
	$(GO) run ./tools/ocibuild -wasm $(BUILD)/sluice.wasm -out $(BUILD)/oci -tag $(TAG)

# make push REGISTRY=127.0.0.1:5000 TAG=v1 [INSECURE=1]
push: $(BUILD)/sluice.wasm
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=host[:port][/path] TAG=tag [INSECURE=1]"; exit 2; }
	$(GO) run ./tools/ocibuild -wasm $(BUILD)/sluice.wasm -push $(REGISTRY)/sluice:$(TAG) -variant compat $(if $(INSECURE),-insecure)
	$(GO) run ./tools/ocibuild -wasm $(BUILD)/sluice.wasm -push $(REGISTRY)/sluice:$(TAG)-oci -variant oci $(if $(INSECURE),-insecure)

clean:
	rm -rf $(BUILD)
