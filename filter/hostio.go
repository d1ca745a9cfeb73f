package filter

import (
	"errors"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// sharedData is store.Store over proxy-wasm shared data. It is the only
// place the filter touches shared-data hostcalls, so the decision cores stay
// testable against store.Memory.
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
