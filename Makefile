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

.PHONY: help build test test-unit test-wasm run lint clean bench oci push fuzz

help:
	@echo "make build   - build/sluice.wasm and build/noop.wasm (standard Go + bridge)"
	@echo "make run     - build, start a demo backend and serve envoy/envoy.yaml (or EXAMPLE=<name>) on our host"
	@echo "make test    - every test: native, wasm in our host, end-to-end with redis-server and webdis"
	@echo "make lint    - gofmt, go vet (native and wasm), go mod tidy leaves no diff"
	@echo "make bench   - benchmark report"
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
	$(BUILD)/echo-backend -addr 127.0.0.1:8081 & backend=$$!; \
	trap 'kill $$backend' EXIT; \
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
