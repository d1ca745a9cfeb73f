package envoy

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// Header names reach the host in lower case (proxy-wasm, HTTP/2 and
// Envoy's own maps all use it), while net/http wants them canonical in
// its Header maps, and http.CanonicalHeaderKey allocates a new string for
// every lower-case name it rewrites. Envoy writes a name from its header
// map as it is, with no per-request work; without a cache, every header a
// filter adds would cost the host an allocation and a scan per response.
// The cache is bounded, so names sent by clients cannot grow it without
// end; past the bound, names are rewritten per call as before.
const maxCanonicalKeys = 1024

var (
	canonicalKeys     sync.Map // lower-case or any name -> its canonical form
	canonicalKeyCount atomic.Int32
)

// canonicalKey is http.CanonicalHeaderKey(name), cached.
func canonicalKey(name string) string {
	if c, ok := canonicalKeys.Load(name); ok {
		return c.(string)
	}
	c := http.CanonicalHeaderKey(name)
	if c != name && canonicalKeyCount.Add(1) <= maxCanonicalKeys {
		// Stored only when rewritten: a name already canonical costs
		// CanonicalHeaderKey no allocation. The key is a copy: name may
		// view a buffer its caller reuses.
		canonicalKeys.Store(string([]byte(name)), c)
	}
	return c
}
