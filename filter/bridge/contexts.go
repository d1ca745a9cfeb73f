//go:build sluice_bridge

package internal

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

// The context registry and the callbacks that dispatch into it (the
// stream callbacks, which differ only in the method they call, dispatch
// through exports.go's onHttp and onTcp helpers). The SDK keeps its
// contexts in four maps whose entries are created and deleted for every
// stream, about a microsecond a request in this guest; here every context
// lives in one open-addressed table of values indexed by its id, whose
// slots are reused, so a stream costs no allocation and a lookup is an
// index and a compare. make build drops the SDK's own registry and
// callbacks (vmstate*.go, abi_callback_*.go) from its copy.

type contextKind uint8

const (
	kindFree contextKind = iota
	kindPlugin
	kindHttp
	kindTcp
)

// contextEntry is one live context.
type contextEntry struct {
	id   uint32
	kind contextKind
	// root is the id of the plugin context it belongs to (its own id for a
	// plugin context).
	root   uint32
	http   types.HttpContext
	tcp    types.TcpContext
	plugin *pluginState
}

// pluginState is what a plugin context holds besides itself: the
// callbacks of the HTTP calls made from it or from its streams.
type pluginState struct {
	context  types.PluginContext
	callouts map[uint32]callout
}

type callout struct {
	callback func(numHeaders, bodySize, numTrailers int)
	// caller is the context the call was made from, made effective again
	// for its reply.
	caller uint32
}

// contextTable is open addressing with linear probing. Context ids are
// consecutive, so the low bits spread them evenly; it grows at half full
// and deletes by shifting the entries after a removed one back, so it
// needs no tombstones however long a VM runs.
type contextTable struct {
	slots []contextEntry
	live  int
}

const initialContextSlots = 64

func (t *contextTable) mask() uint32 { return uint32(len(t.slots) - 1) }

// get returns the live context id, or nil.
func (t *contextTable) get(id uint32) *contextEntry {
	if len(t.slots) == 0 {
		return nil
	}
	m := t.mask()
	for i := id & m; ; i = (i + 1) & m {
		e := &t.slots[i]
		if e.kind == kindFree {
			return nil
		}
		if e.id == id {
			return e
		}
	}
}

// insert returns a cleared slot for id, which must not be live.
func (t *contextTable) insert(id uint32) *contextEntry {
	if (t.live+1)*2 > len(t.slots) {
		t.grow()
	}
	m := t.mask()
	i := id & m
	for t.slots[i].kind != kindFree {
		i = (i + 1) & m
	}
	t.live++
	e := &t.slots[i]
	*e = contextEntry{id: id}
	return e
}

func (t *contextTable) grow() {
	old := t.slots
	n := 2 * len(old)
	if n == 0 {
		n = initialContextSlots
	}
	t.slots, t.live = make([]contextEntry, n), 0
	for i := range old {
		if old[i].kind != kindFree {
			e := t.insert(old[i].id)
			*e = old[i]
		}
	}
}

// remove frees the slot of id, which must be live, then moves back every
// entry of the same probe run that could no longer be found past the new
// hole.
func (t *contextTable) remove(id uint32) {
	m := t.mask()
	hole := id & m
	for t.slots[hole].id != id || t.slots[hole].kind == kindFree {
		hole = (hole + 1) & m
	}
	t.slots[hole] = contextEntry{}
	t.live--
	for i := (hole + 1) & m; t.slots[i].kind != kindFree; i = (i + 1) & m {
		home := t.slots[i].id & m
		// The entry at i must move into the hole when a lookup starting at
		// its home would pass the hole: when the hole lies cyclically in
		// [home, i).
		if (i-home)&m >= (i-hole)&m {
			t.slots[hole] = t.slots[i]
			t.slots[i] = contextEntry{}
			hole = i
		}
	}
}

var (
	vmContext       types.VMContext
	contexts        contextTable
	activeContextID uint32
)

func SetVMContext(ctx types.VMContext) { vmContext = ctx }

// RegisterHttpCallout files a call's callback under the plugin of the
// context that made it.
func RegisterHttpCallout(calloutID uint32, callback func(numHeaders, bodySize, numTrailers int)) {
	e := contexts.get(activeContextID)
	if e == nil {
		panic("http call from an unknown context")
	}
	root := contexts.get(e.root)
	if root == nil || root.plugin == nil {
		panic("http call from a context without a plugin")
	}
	root.plugin.callouts[calloutID] = callout{callback: callback, caller: activeContextID}
}

func proxyABIVersion() {}

func proxyOnVMStart(_ uint32, vmConfigurationSize int) types.OnVMStartStatus {
	return vmContext.OnVMStart(vmConfigurationSize)
}

func proxyOnContextCreate(contextID, pluginContextID uint32) {
	if contexts.get(contextID) != nil {
		panic("context id duplicated")
	}
	if pluginContextID == 0 {
		ctx := vmContext.NewPluginContext(contextID)
		e := contexts.insert(contextID)
		e.kind, e.root = kindPlugin, contextID
		e.plugin = &pluginState{context: ctx, callouts: map[uint32]callout{}}
		return
	}
	root := contexts.get(pluginContextID)
	if root == nil || root.kind != kindPlugin {
		panic("invalid plugin context id")
	}
	plugin := root.plugin.context
	if h := plugin.NewHttpContext(contextID); h != nil {
		e := contexts.insert(contextID)
		e.kind, e.root, e.http = kindHttp, pluginContextID, h
		return
	}
	if c := plugin.NewTcpContext(contextID); c != nil {
		e := contexts.insert(contextID)
		e.kind, e.root, e.tcp = kindTcp, pluginContextID, c
		return
	}
	panic("invalid context id on proxy_on_context_create")
}

// enter makes contextID active and returns it, which must be of kind.
func enter(contextID uint32, kind contextKind) *contextEntry {
	e := contexts.get(contextID)
	if e == nil || e.kind != kind {
		panic("invalid context id")
	}
	activeContextID = contextID
	return e
}

func proxyOnConfigure(pluginContextID uint32, size int) types.OnPluginStartStatus {
	return enter(pluginContextID, kindPlugin).plugin.context.OnPluginStart(size)
}

func proxyOnTick(pluginContextID uint32) {
	enter(pluginContextID, kindPlugin).plugin.context.OnTick()
}

func proxyOnQueueReady(pluginContextID, queueID uint32) {
	enter(pluginContextID, kindPlugin).plugin.context.OnQueueReady(queueID)
}

// proxyOnHttpCallResponse runs a call's callback in the context that made
// it. The reply can arrive after that context was deleted (its stream
// ended first); the callback is then dropped, since anything it did to a
// stream would reach a context the host no longer has.
func proxyOnHttpCallResponse(pluginContextID, calloutID uint32, numHeaders, bodySize, numTrailers int) {
	root := contexts.get(pluginContextID)
	if root == nil || root.kind != kindPlugin {
		panic("http call response on an invalid plugin context")
	}
	c, ok := root.plugin.callouts[calloutID]
	if !ok {
		panic("invalid callout id")
	}
	delete(root.plugin.callouts, calloutID)
	activeContextID = c.caller
	if contexts.get(c.caller) != nil {
		ProxySetEffectiveContext(c.caller)
		c.callback(numHeaders, bodySize, numTrailers)
	}
}

func proxyOnLog(contextID uint32) {
	e := contexts.get(contextID)
	if e == nil {
		return
	}
	switch e.kind {
	case kindHttp:
		activeContextID = contextID
		e.http.OnHttpStreamDone()
	case kindTcp:
		activeContextID = contextID
		e.tcp.OnStreamDone()
	}
}

func proxyOnDone(contextID uint32) bool {
	if e := contexts.get(contextID); e != nil && e.kind == kindPlugin {
		activeContextID = contextID
		return e.plugin.context.OnPluginDone()
	}
	return true
}

func proxyOnDelete(contextID uint32) {
	if contexts.get(contextID) == nil {
		panic("invalid context on proxy_on_delete")
	}
	contexts.remove(contextID)
}
