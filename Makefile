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
# What the bridge adds to the SDK's public package (gRPC callouts).
BRIDGE_PUBLIC := $(wildcard filter/bridge/proxywasm/*.go)
SDK_REPLACED := vmstate.go vmstate_test_export.go abi_callback_alloc.go abi_callback_configuration.go \
	abi_callback_l4.go abi_callback_l7.go abi_callback_lifecycle.go abi_callback_queue.go \
	abi_callback_test_export.go abi_callback_timers.go abi_callback_version.go \
	serde.go abi_enums.go
GO_SOURCES := $(shell find filter limiter breaker -name '*.go' -not -name '*_test.go' 2>/dev/null)
EXAMPLE ?=
CONCURRENCY ?= 2
PROFILE ?= envoy-1.39
ifeq ($(EXAMPLE),)
RUN_CONFIG := envoy/envoy.yaml
else
RUN_CONFIG := examples/$(EXAMPLE)/envoy.yaml
endif

.PHONY: help build deps test run lint clean bench soak oci push fuzz test-realhost bench-realhost realhost-block cpphost-given

help:
	@echo "make build   - build/sluice.wasm and build/noop.wasm (standard Go + bridge)"
	@echo "make run     - build, start the demo backend and limits service, serve envoy/envoy.yaml (or EXAMPLE=<name>) on our host"
	@echo "make test    - every test: native, wasm in our host, end-to-end with redis-server and webdis (runs make deps first)"
	@echo "make deps    - install the Debian packages the tests need (as root), or print the command that does"
	@echo "make lint    - gofmt, go vet (native and wasm), pure packages free of the SDK, go mod tidy leaves no diff"
	@echo "make bench   - BENCHMARKS.md and its plot (BENCH_QUICK=1: the short CI mode; BENCH_OUT=path: elsewhere)"
	@echo "make soak    - the 10,000,000-request soak and 1,000,000 client IPs; updates BENCHMARKS.md"
	@echo "make test-realhost CPPHOST=dir  - the behavioural cases in the real host (proxy-wasm-cpp-host on Wasmtime; optional)"
	@echo "make bench-realhost CPPHOST=dir - the real-host section of BENCHMARKS.md (optional)"
	@echo "make fuzz    - every fuzz target for FUZZTIME (default 20s)"
	@echo "make oci     - OCI image layouts under build/oci"
	@echo "make clean"

build: $(BUILD)/sluice.wasm $(BUILD)/noop.wasm

$(BUILD)/sdk/.stamp: go.mod go.sum $(BRIDGE) $(BRIDGE_PUBLIC)
	rm -rf $(BUILD)/sdk
	mkdir -p $(BUILD)
	$(GO) mod download $(SDK_MOD)
	cp -R "$$($(GO) list -m -f '{{.Dir}}' $(SDK_MOD))" $(BUILD)/sdk
	chmod -R u+w $(BUILD)/sdk
	rm $(BUILD)/sdk/proxywasm/internal/abi_hostcalls_mock.go
	@# The bridge replaces the SDK's context registry and callbacks
	@# (contexts.go), its map and path encoding (maps.go) and its enums
	@# (enums.go).
	rm $(addprefix $(BUILD)/sdk/proxywasm/internal/,$(SDK_REPLACED))
	find $(BUILD)/sdk -name '*_test.go' -delete
	cp $(BRIDGE) $(BUILD)/sdk/proxywasm/internal/
	cp $(BRIDGE_PUBLIC) $(BUILD)/sdk/proxywasm/
	{ cat go.mod; echo; echo "replace $(SDK_MOD) => ./$(BUILD)/sdk"; } > $(BUILD)/go.wasm.mod
	cp go.sum $(BUILD)/go.wasm.sum
	touch $@

$(BUILD)/sluice.wasm: $(BUILD)/sdk/.stamp $(GO_SOURCES) filter/cmd/sluice/main.go
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $@ ./filter/cmd/sluice
	$(GO) run ./tools/wasmcheck $@

$(BUILD)/noop.wasm: $(BUILD)/sdk/.stamp e2e/noop/main.go
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $@ ./e2e/noop
	$(GO) run ./tools/wasmcheck $@

# The Debian packages the tests need (the list is in the script): installed
# when run as root with apt-get, otherwise make stops here and prints the
# command that installs them. make run needs none of them.
deps:
	@bash tools/deps/deps.sh

# Every test: native, wasm in our host, end to end against real servers.
# deps comes first so that a missing server stops make at once. CI=true
# (unless set otherwise) makes any prerequisite still missing fail its
# test instead of skipping it: make test means every test.
# -p 1: one package's tests at a time. The end-to-end tests drive real
# servers at a set rate on a 2-core machine; sharing it with another
# package's tests starves their load client and fails them for that alone.
test: deps build
	CI=$${CI:-true} $(GO) test -count=1 -p 1 -timeout 40m ./...

run: build
	$(GO) build -o $(BUILD)/sluice-envoy ./e2e/cmd/sluice-envoy
	$(GO) build -o $(BUILD)/echo-backend ./e2e/cmd/echo-backend
	$(GO) build -o $(BUILD)/limits-server ./e2e/cmd/limits-server
	$(GO) build -o $(BUILD)/limits-grpc ./examples/external-limits-grpc
	$(BUILD)/echo-backend -addr 127.0.0.1:8081 & backend=$$!; \
	$(BUILD)/limits-server -addr 127.0.0.1:8082 & limits=$$!; \
	$(BUILD)/echo-backend -llm -addr 127.0.0.1:8083 & llm=$$!; \
	$(BUILD)/limits-grpc -addr 127.0.0.1:8084 & limitsgrpc=$$!; \
	trap 'kill $$backend $$limits $$llm $$limitsgrpc' EXIT; \
	$(BUILD)/sluice-envoy -c $(RUN_CONFIG) --concurrency $(CONCURRENCY) --wasm-profile $(PROFILE)

# The packages that decide without proxy-wasm: none may depend on the SDK,
# natively or as built for the wasm, so they stay pure Go, testable and
# usable outside a proxy. Only the adapter (filter/*.go), filter/bridge and
# filter/cmd may. A package joins the list once it is pure.
PURE_PKGS := ./limiter/... ./breaker/... ./filter/config/... ./filter/backend/... ./filter/limitsvc/... \
	./filter/host/... ./filter/engine/... ./filter/distributed/... ./filter/external/... ./filter/ops/... ./filter/request/...

lint: $(BUILD)/sdk/.stamp
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	@fail=0; \
	for pkg in $(PURE_PKGS); do \
	  for target in native wasm; do \
	    envs=; flags=; \
	    if [ $$target = wasm ]; then envs="$(WASM_ENV)"; flags="-modfile=$(BUILD)/go.wasm.mod -tags sluice_bridge"; fi; \
	    imports=$$(env $$envs $(GO) list $$flags -deps -f '{{$$p := .ImportPath}}{{range .Imports}}{{$$p}} imports {{.}}{{"\n"}}{{end}}' $$pkg); \
	    offenders=$$(grep " imports $(SDK_MOD)" <<<"$$imports" | grep -v "^$(SDK_MOD)" || true); \
	    if [ -n "$$offenders" ]; then \
	      echo "lint: $$pkg must not depend on $(SDK_MOD) (it is in PURE_PKGS), but its $$target build does:"; \
	      sed 's/^/  /' <<<"$$offenders"; fail=1; \
	    fi; \
	  done; \
	done; \
	exit $$fail
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

# make bench: one command, one report (BENCHMARKS.md and its plot), in
# about 14 minutes on 2 cores (10, plus 4 for the real-traffic section). BENCH_QUICK=1 is the short mode CI runs to
# prove the harness works; it asserts no timings. BENCH_OUT writes the
# report elsewhere (the plot goes next to it), e.g. in CI, so the committed
# one stays as it is. The soak takes longer than that, so `make soak` keeps
# its results in a block of BENCHMARKS.md that `make bench` carries over.
BENCH_OUT ?= BENCHMARKS.md
BENCH_PLOT := $(BENCH_OUT:.md=.png)
ifeq ($(BENCH_QUICK),)
BENCH_COUNT := 5
BENCH_NATIVE_TIME := 300ms
BENCH_LIFECYCLE_TIME := 500ms
BENCH_DIST := SLUICE_BENCH_DIST_RUNS=3 SLUICE_BENCH_DIST_SECONDS=15
BENCH_MEMORY := SLUICE_SOAK_REQUESTS=3000000 SLUICE_SOAK_IPS=1000000
else
BENCH_COUNT := 1
BENCH_NATIVE_TIME := 20ms
BENCH_LIFECYCLE_TIME := 50ms
BENCH_DIST := SLUICE_BENCH_DIST_RUNS=1
BENCH_MEMORY := SLUICE_SOAK_REQUESTS=400000 SLUICE_SOAK_IPS=40000
endif
BENCH_ENV := SLUICE_BENCH=1 BENCH_QUICK=$(BENCH_QUICK)
# The two-worker memory run under the default profile, and the distinct
# client IPs run; `make soak` runs both profiles at full length.
MEMORY_RUN := '^TestSoak(TwoWorkers|DistinctClientIPs)$$/^envoy-1\.39$$'
bench: build
	@mkdir -p $(BUILD) $(dir $(BENCH_OUT))
	@# Read before BENCHMARKS.md is rewritten.
	@# A BENCHMARKS.md without soak results yet (a new checkout of an old
	@# report) gets a pointer to make soak instead.
	$(GO) run ./tools/mdblock -name soak -get BENCHMARKS.md > $(BUILD)/bench-soak-block.md \
		|| echo "No soak results yet: run \`make soak\`." > $(BUILD)/bench-soak-block.md
	@# The real-host section is measured only when CPPHOST is given;
	@# otherwise the last one is carried over, or a pointer replaces it.
	$(GO) run ./tools/mdblock -name realhost -get BENCHMARKS.md > $(BUILD)/bench-realhost-block.md \
		|| echo "No real-host results yet: run \`make bench-realhost CPPHOST=dir\` (tools/realhost/README.md)." > $(BUILD)/bench-realhost-block.md
	@if [ -n "$(CPPHOST)" ]; then \
	  echo "== 1b. filter cost in the real host"; start=$$(date +%s); \
	  $(MAKE) --no-print-directory realhost-block CPPHOST="$(CPPHOST)" BENCH_QUICK="$(BENCH_QUICK)"; \
	  cp $(BUILD)/realhost-block.md $(BUILD)/bench-realhost-block.md; \
	  echo "== took $$(( $$(date +%s) - start ))s"; \
	fi
	@echo "== 1. filter cost in our host"; start=$$(date +%s); \
	$(BENCH_ENV) SLUICE_BENCH_OUT=$(CURDIR)/$(BUILD)/bench-lifecycle.md \
		$(GO) test -count=1 -timeout 20m -run '^TestLifecycleReport$$' -benchtime $(BENCH_LIFECYCLE_TIME) ./e2e/; \
	echo "== took $$(( $$(date +%s) - start ))s"
	@echo "== 2. native cores"; start=$$(date +%s); \
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -benchtime $(BENCH_NATIVE_TIME) ./limiter/ ./breaker/ \
		| tee $(BUILD)/bench-native.txt \
		| $(GO) run ./tools/benchfmt -baseline XTimeRate,XTimeRateAllowN > $(BUILD)/bench-native.md; \
	echo "== took $$(( $$(date +%s) - start ))s"
	@echo "== 3. distributed"; start=$$(date +%s); \
	$(BENCH_ENV) $(BENCH_DIST) SLUICE_BENCH_OUT_DISTRIBUTED=$(CURDIR)/$(BUILD)/bench-distributed.md \
		SLUICE_BENCH_SERIES_DISTRIBUTED=$(CURDIR)/$(BUILD)/bench-distributed-series.json \
		$(GO) test -count=1 -timeout 20m -run '^TestBenchDistributed$$' ./e2e/; \
	$(GO) run ./tools/benchreport -in $(BUILD)/bench-distributed-series.json -out $(BENCH_PLOT); \
	echo "== took $$(( $$(date +%s) - start ))s"
	@echo "== 4. through the proxy"; start=$$(date +%s); \
	$(BENCH_ENV) SLUICE_BENCH_OUT_PROXY=$(CURDIR)/$(BUILD)/bench-proxy.md \
		$(GO) test -count=1 -timeout 10m -run '^TestBenchProxy$$' ./e2e/; \
	echo "== took $$(( $$(date +%s) - start ))s"
	@echo "== 4b. real traffic, one pinned worker"; start=$$(date +%s); \
	$(BENCH_ENV) SLUICE_BENCH_OUT_TRAFFIC=$(CURDIR)/$(BUILD)/bench-traffic.md \
		$(GO) test -count=1 -timeout 20m -run '^TestBenchTraffic$$' ./e2e/; \
	echo "== took $$(( $$(date +%s) - start ))s"
	@echo "== 5. memory"; start=$$(date +%s); rm -rf $(BUILD)/soak; \
	SLUICE_SOAK=1 $(BENCH_MEMORY) $(GO) test -count=1 -timeout 20m -run $(MEMORY_RUN) ./e2e/; \
	test "$$(ls $(BUILD)/soak | grep -vc ^00-header)" -eq 2; \
	echo "== took $$(( $$(date +%s) - start ))s"
	@echo "== fault matrix"; start=$$(date +%s); rm -rf $(BUILD)/faults; \
	$(GO) test -count=1 -timeout 10m -run '^TestFault' ./e2e/; \
	test "$$(ls $(BUILD)/faults | grep -vc ^00-header)" -eq 12; \
	echo "== took $$(( $$(date +%s) - start ))s"
	@{ \
	  echo "# Benchmarks"; echo; \
	  echo "Produced by \`$(if $(BENCH_QUICK),BENCH_QUICK=1 )make bench\` on $$(nproc) cores, $$(date -u +%Y-%m-%dT%H:%MZ) (commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)); load average at the end: $$(cut -d' ' -f1-3 /proc/loadavg)."; \
	  echo "The machine is shared, so absolute figures move from run to run; ratios are measured within one run and carry less of that noise."; echo; \
	  echo "## 1. Filter cost in our host"; echo; \
	  echo "Per-request lifecycle (context create, request headers, upstream, response headers, log, done, delete) on one worker of our host, interleaved with the no-op SDK filter built the same way; the median of the rounds and its spread (min–max)."; \
	  echo "The streams run on the worker's own event loop (\`host.Runtime.OnWorker\`), as an Envoy worker thread runs a stream's callbacks: one after another on one goroutine, with no handoff between goroutines, and the in-memory upstream answers on the loop too; the host's one stream code path (\`Plugin.Serve\`) runs the same callbacks in the same order as for real traffic. What real traffic pays besides, a connection's goroutine handing each turn of the stream to the loop and HTTP itself, is the regression section 4b."; \
	  echo "Each case is divided by the no-op SDK filter and by the WAT floor: a hand-written WAT module (e2e/testdata/wat/floor.wat, assembled with wat2wasm at test time) making exactly the hostcalls of the Go floor of one limit + one breaker with a bump allocator, the physical limit of this host for that work. The WAT no-op is what a stream's callbacks cost the host with nothing in them, the row to set beside the real proxy-wasm C++ host's no-op lifecycle: what still separates them is this host's own work per stream (Go allocations and their garbage collection, wazero's call path), not a crossing between goroutines."; \
	  echo "The hybrid case takes its lease from a real Redis through webdis and then stops the guest's clock, so every measured request is served from the lease (no renewal, no expiry; the benchmark fails if any request calls Redis); what renewals cost is in section 3."; \
	  echo "Guest allocations are counted in a separate, untimed run: a wazero function listener counts calls to \`runtime.mallocgc\`, the Go runtime's allocation entry point, over thousands of requests after warm-up."; echo; \
	  cat $(BUILD)/bench-lifecycle.md; echo; \
	  echo "## 1b. Filter cost in the real host"; echo; \
	  echo "$(REALHOST_ABOUT)"; echo; \
	  echo "<!-- realhost:begin -->"; cat $(BUILD)/bench-realhost-block.md; echo "<!-- realhost:end -->"; echo; \
	  echo "## 2. Native cores"; echo; \
	  echo "ns per decision (median and spread min–max over \`-count $(BENCH_COUNT)\`) against golang.org/x/time/rate's AllowN in the same run."; echo; \
	  cat $(BUILD)/bench-native.md; echo; \
	  echo "## 3. Distributed"; echo; \
	  echo "![admitted per second against the limit]($(notdir $(BENCH_PLOT)))"; echo; \
	  sed '1{/^#/d}' $(BUILD)/bench-distributed.md; echo; \
	  echo "## 4. Through the proxy"; echo; \
	  cat $(BUILD)/bench-proxy.md; echo; \
	  echo "## 4b. Real traffic through one pinned worker"; echo; \
	  echo "Issue 15: the lifecycle section measures callbacks alone; this one serves real HTTP through one worker of our host, with the WAT floor as the physical limit. Run it alone with \`SLUICE_BENCH=1 go test -count=1 -run '^TestBenchTraffic$$' ./e2e/\` (\`SLUICE_BENCH_TRAFFIC_PROFILE=dir\` adds a Go CPU profile per host process)."; echo; \
	  cat $(BUILD)/bench-traffic.md; echo; \
	  echo "## 5. Memory"; echo; \
	  echo "Wasm linear memory of each worker after warm-up and at the end (target: growth under 1 MiB), and the shared-data entries after distinct client IPs through one per-IP limit (target: at most the table's slot bound). The tests assert both targets, zero traps and that every request was answered."; echo; \
	  echo "### This run"; echo; \
	  echo "The soak's two-worker run, shorter, with the same limits, breaker and flaky upstream, and the distinct-IP run: \`$(BENCH_MEMORY)\`."; echo; \
	  cat $(BUILD)/soak/*.md; echo; \
	  echo "### Soak: 10,000,000 requests through 2 workers, both host profiles"; echo; \
	  echo "<!-- soak:begin -->"; cat $(BUILD)/bench-soak-block.md; echo "<!-- soak:end -->"; echo; \
	  echo "## Fault matrix"; echo; \
	  echo "Each row is written by the test named in it (\`go test -run '^TestFault' ./e2e/\`), which asserts what the row claims. Redis rows: one instance of our host (2 workers) through real webdis to a real redis-server, four limits of 100 per hour (global under failure_policy allow, deny, local with instances 4, and hybrid under deny), wall-clock times. Other rows: the guest's clock stepped by the test, so recovery times are exact guest time, except the GC pause row, where the test moves only the monotonic clock the Go runtime reads (one worker, the soak's limits and breaker)."; echo; \
	  cat $(BUILD)/faults/*.md; \
	} > $(BENCH_OUT)
	@echo "wrote $(BENCH_OUT) and $(BENCH_PLOT)"

# The real host (tools/realhost/README.md): proxy-wasm-cpp-host, the
# library Envoy embeds for Wasm, on Wasmtime, built from checkouts under
# CPPHOST. Optional: make test and CI need neither target, and without
# CPPHOST both stop with what is missing.
CPPHOST ?=
REALHOST_ABOUT := The same lifecycle in proxy-wasm-cpp-host, the library Envoy embeds for Wasm, on Wasmtime v37 (Cranelift), with the minimal Envoy-like host of tools/realhost; one worker VM per case, interleaved in rounds. The figure is the host thread's CPU time per request, which leaves out whatever else ran on a shared core (wall time beside it); hostcalls and calls into the guest are counted from cpp-host's own trace. The hybrid case is left out because the benchmark's driver serves no cluster for its lease (the behavioural tests serve Redis callouts there). \`make bench-realhost CPPHOST=dir\` (or \`make bench CPPHOST=dir\`) measures it; without CPPHOST \`make bench\` carries the block below over. \`tools/realhost/profile.sh CPPHOST WASM CONFIG\` profiles one case's requests with perf, the guest's functions named (tools/realhost/README.md, \"Profiling the guest\").
# Pinned to the last core where taskset exists: the driver and the test
# share one core, which steadies the rounds on a shared machine.
REALHOST_PIN := $(shell command -v taskset >/dev/null && echo taskset -c $$(( $$(nproc) - 1 )))

cpphost-given:
	@if [ -z "$(CPPHOST)" ]; then \
	  echo "CPPHOST is not set: it names a directory holding checkouts of proxy-wasm-cpp-host and proxy-wasm-cpp-sdk,"; \
	  echo "e.g. make $(MAKECMDGOALS) CPPHOST=/path/to/cpphost; tools/realhost/README.md says how to clone them."; \
	  exit 2; fi
	@bash tools/realhost/build.sh "$(CPPHOST)" $(BUILD)/realhost >/dev/null

test-realhost: cpphost-given build
	CPPHOST="$(abspath $(CPPHOST))" CI=$${CI:-true} $(GO) test -count=1 -timeout 30m -run '^TestRealHost' ./e2e/

# The real-host block of BENCHMARKS.md, into $(BUILD)/realhost-block.md.
realhost-block: cpphost-given build
	SLUICE_BENCH=1 BENCH_QUICK=$(BENCH_QUICK) CPPHOST="$(abspath $(CPPHOST))" \
		SLUICE_BENCH_OUT_REALHOST=$(CURDIR)/$(BUILD)/bench-realhost.md \
		$(REALHOST_PIN) $(GO) test -count=1 -timeout 30m -run '^TestRealHostLifecycleReport$$' ./e2e/
	@{ \
	  echo "Produced by \`$(if $(BENCH_QUICK),BENCH_QUICK=1 )make bench-realhost\` on $$(nproc) cores$(if $(REALHOST_PIN), pinned with \`$(REALHOST_PIN)\`), $$(date -u +%Y-%m-%dT%H:%MZ) (commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown), proxy-wasm-cpp-host $$(git -C "$(CPPHOST)/proxy-wasm-cpp-host" rev-parse --short HEAD 2>/dev/null || echo unknown)); load average at the end: $$(cut -d' ' -f1-3 /proc/loadavg)."; echo; \
	  cat $(BUILD)/bench-realhost.md; \
	} > $(BUILD)/realhost-block.md

bench-realhost: realhost-block
	$(GO) run ./tools/mdblock -name realhost -set $(BUILD)/realhost-block.md $(BENCH_OUT)
	@echo "updated the real-host block of $(BENCH_OUT)"

# make soak: the 10,000,000-request soak through 2 workers under both host
# profiles and the 1,000,000 distinct client IPs run (about 10 minutes on 2
# cores); on success it replaces the soak block of BENCHMARKS.md.
soak: build
	rm -rf $(BUILD)/soak
	SLUICE_SOAK=1 $(GO) test -count=1 -timeout 3h -run '^TestSoak(TwoWorkers|DistinctClientIPs)$$' ./e2e/
	@{ \
	  echo "Produced by \`make soak\` on $$(nproc) cores, $$(date -u +%Y-%m-%dT%H:%MZ) (commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)); load average at the end: $$(cut -d' ' -f1-3 /proc/loadavg). It writes this block only when every assertion held."; echo; \
	  cat $(BUILD)/soak/*.md; \
	} > $(BUILD)/soak-block.md
	$(GO) run ./tools/mdblock -name soak -set $(BUILD)/soak-block.md BENCHMARKS.md
	@echo "updated the soak block of BENCHMARKS.md"

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
