// Package filter is the Sluice proxy-wasm plugin: it adapts Envoy's
// callbacks to the limiter and breaker cores.
package filter

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// requestCounterKey is a shared-data key every worker increments, so that
// tests can see one worker's writes from another.
const requestCounterKey = "sluice.requests_seen"

// maxCASAttempts bounds the read-modify-write loop; eight workers racing on
// one key settle well within it.
const maxCASAttempts = 16

// NewVMContext returns the root of the plugin, registered from main's init.
func NewVMContext() types.VMContext { return &vmContext{} }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{store: sharedData{}}
}

type pluginContext struct {
	types.DefaultPluginContext
	store    store.Store
	requests proxywasm.MetricCounter
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	p.requests = proxywasm.DefineCounterMetric("sluice.requests_total")
	if err := ensureShared(p.store, requestCounterKey, make([]byte, 8)); err != nil {
		proxywasm.LogCriticalf("sluice: creating shared data: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p}
}

type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	seen   uint64
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	h.plugin.requests.Increment(1)
	n, err := incrementShared(h.plugin.store, requestCounterKey)
	if err != nil {
		proxywasm.LogWarnf("sluice: shared counter: %v", err)
		return types.ActionContinue
	}
	h.seen = n
	_ = proxywasm.ReplaceHttpRequestHeader("x-sluice-seen", strconv.FormatUint(n, 10))
	return types.ActionContinue
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if h.seen != 0 {
		_ = proxywasm.ReplaceHttpResponseHeader("x-sluice-seen", strconv.FormatUint(h.seen, 10))
	}
	return types.ActionContinue
}

// ensureShared creates key with an initial value unless it exists. Shared
// data has no create-if-absent (the CAS is only checked on existing keys),
// so two first writers at request time could overwrite each other's
// update; creating keys at plugin start, before any traffic, makes every
// later write a checked CAS. Concurrent starts all write the same value.
func ensureShared(s store.Store, key string, initial []byte) error {
	_, _, err := s.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return s.Set(key, initial, 0)
	}
	return err
}

// incrementShared adds one to a little-endian uint64 in the store with CAS.
// A value of the wrong length is treated as zero rather than trusted.
func incrementShared(s store.Store, key string) (uint64, error) {
	for range maxCASAttempts {
		v, cas, err := s.Get(key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		if errors.Is(err, store.ErrNotFound) {
			// Never a blind write: the key is created at plugin start.
			return 0, err
		}
		var n uint64
		if len(v) == 8 {
			n = binary.LittleEndian.Uint64(v)
		}
		n++
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], n)
		err = s.Set(key, buf[:], cas)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, store.ErrCASMismatch) {
			return 0, err
		}
	}
	return 0, errors.New("shared counter: too much contention")
}
