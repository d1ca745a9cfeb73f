package filter

import (
	"errors"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// This file is the only place the request path makes proxy-wasm hostcalls
// other than metrics, so what a request costs in hostcalls can be read off
// in one place.

// sharedData is store.Store over proxy-wasm shared data.
type sharedData struct{}

func (sharedData) Get(key string) ([]byte, uint32, error) {
	v, cas, err := proxywasm.GetSharedData(key)
	switch {
	case err == nil:
		return v, cas, nil
	case errors.Is(err, types.ErrorStatusNotFound):
		return nil, 0, store.ErrNotFound
	default:
		return nil, 0, err
	}
}

func (sharedData) Set(key string, value []byte, cas uint32) error {
	err := proxywasm.SetSharedData(key, value, cas)
	if errors.Is(err, types.ErrorStatusCasMismatch) {
		return store.ErrCASMismatch
	}
	return err
}

// hostAccess is what requestInfo reads from the current stream.
type hostAccess interface {
	requestHeaders() [][2]string
	// property returns a string property, or "" when the host has none.
	property(path ...string) string
}

type proxyHost struct{}

func (proxyHost) requestHeaders() [][2]string {
	hs, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return nil
	}
	return hs
}

func (proxyHost) property(path ...string) string {
	v, err := proxywasm.GetProperty(path)
	if err != nil {
		return ""
	}
	return string(v)
}

// clock is the filter's time source. Tests replace it; in the wasm,
// time.Now reads the host's WASI clock.
type clock func() time.Time
