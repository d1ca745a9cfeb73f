package host

import (
	"context"
	"encoding/binary"
	"strings"
	"time"
	"unsafe"

	"github.com/tetratelabs/wazero/api"
)

// Status is the proxy-wasm WasmResult.
type Status uint32

const (
	StatusOK                  Status = 0
	StatusNotFound            Status = 1
	StatusBadArgument         Status = 2
	StatusSerializationFailed Status = 3
	StatusParseFailure        Status = 4
	StatusInvalidMemoryAccess Status = 6
	StatusEmpty               Status = 7
	StatusCasMismatch         Status = 8
	StatusInternalFailure     Status = 10
	StatusUnimplemented       Status = 12
)

// Map types.
const (
	mapRequestHeaders       = 0
	mapRequestTrailers      = 1
	mapResponseHeaders      = 2
	mapResponseTrailers     = 3
	mapHTTPCallRespHeaders  = 6
	mapHTTPCallRespTrailers = 7
)

// Buffer types.
const (
	bufRequestBody      = 0
	bufResponseBody     = 1
	bufHTTPCallResponse = 4
	bufVMConfiguration  = 6
	bufPluginConfig     = 7
)

func ok(s []uint64, st Status) { s[0] = uint64(st) }

// wrote ends a hostcall whose last step wrote its results to guest
// memory: Ok, or InvalidMemoryAccess when a write failed.
func wrote(s []uint64, good bool) {
	if good {
		ok(s, StatusOK)
	} else {
		ok(s, StatusInvalidMemoryAccess)
	}
}

// streamOrNotFound is the current stream, or nil after answering NotFound
// for a hostcall made outside one.
func (v *vm) streamOrNotFound(s []uint64) *stream {
	st := v.stream()
	if st == nil {
		ok(s, StatusNotFound)
	}
	return st
}

// guestArgs reads a hostcall's (pointer, size) arguments from guest memory
// and checks its other arguments, in the order the hostcall checks them.
// The first failure is remembered rather than answered at once; failed
// answers it. Reads and checks after a failure have no effect on the guest.
type guestArgs struct {
	v      *vm
	s      []uint64
	status Status
}

func (v *vm) args(s []uint64) guestArgs { return guestArgs{v: v, s: s, status: StatusOK} }

// check fails the hostcall with st unless good.
func (a *guestArgs) check(good bool, st Status) {
	if !good && a.status == StatusOK {
		a.status = st
	}
}

// bytes reads the argument whose pointer is s[i] and size s[i+1]; a failed
// read is InvalidMemoryAccess.
func (a *guestArgs) bytes(i int) []byte {
	b, good := a.v.read(uint32(a.s[i]), uint32(a.s[i+1]))
	a.check(good, StatusInvalidMemoryAccess)
	return b
}

func (a *guestArgs) string(i int) string { return string(a.bytes(i)) }

// failed reports whether a read or check failed, after answering its
// status.
func (a *guestArgs) failed() bool {
	if a.status != StatusOK {
		ok(a.s, a.status)
		return true
	}
	return false
}

// headerMapOrBad is the header map of type s[0], or nil after answering
// BadArgument when it is not available now, or is read-only and write is
// asked for.
func (v *vm) headerMapOrBad(s []uint64, write bool) *[][2]string {
	m, writable := v.headerMap(uint32(s[0]))
	if m == nil || write && !writable {
		ok(s, StatusBadArgument)
		return nil
	}
	return m
}

func (v *vm) contextID() uint32 {
	if v.effective != 0 {
		return v.effective
	}
	return v.current
}

func (v *vm) stream() *stream {
	return v.streams[v.contextID()]
}

func (v *vm) read(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return v.mem.Read(ptr, size)
}

func (v *vm) readString(ptr, size uint32) (string, bool) {
	b, ok := v.read(ptr, size)
	if !ok {
		return "", false
	}
	return string(b), true
}

// copyOut is cpp-host's copyToPointerSize: allocate in the guest (nothing
// for empty data), copy, store pointer and size.
func (v *vm) copyOut(ctx context.Context, data []byte, ptrPtr, sizePtr uint32) bool {
	var addr uint32
	if len(data) > 0 {
		addr = v.alloc(ctx, uint32(len(data)))
		if !v.mem.Write(addr, data) {
			return false
		}
	}
	return v.mem.WriteUint32Le(ptrPtr, addr) && v.mem.WriteUint32Le(sizePtr, uint32(len(data)))
}

// replyBytes copies data out to the guest and sets the hostcall's status:
// Ok, or InvalidMemoryAccess when the return pointers are bad.
func (v *vm) replyBytes(ctx context.Context, s []uint64, data []byte, ptrPtr, sizePtr uint32) {
	wrote(s, v.copyOut(ctx, data, ptrPtr, sizePtr))
}

// replyString is replyBytes for a string.
func (v *vm) replyString(ctx context.Context, s []uint64, data string, ptrPtr, sizePtr uint32) {
	wrote(s, v.copyOutString(ctx, data, ptrPtr, sizePtr))
}

func (v *vm) copyOutString(ctx context.Context, s string, ptrPtr, sizePtr uint32) bool {
	return v.copyOut(ctx, unsafe.Slice(unsafe.StringData(s), len(s)), ptrPtr, sizePtr)
}

// encodePairs writes Envoy's pairs format into v.pairBuf (not v.scratch:
// the allocator may log through fd_write while the pairs are being copied).
func (v *vm) encodePairs(pairs [][2]string) []byte {
	size := 4
	for _, p := range pairs {
		size += 8 + len(p[0]) + 1 + len(p[1]) + 1
	}
	if cap(v.pairBuf) < size {
		v.pairBuf = make([]byte, size, size*2)
	}
	b := v.pairBuf[:size]
	binary.LittleEndian.PutUint32(b, uint32(len(pairs)))
	off := 4
	for _, p := range pairs {
		binary.LittleEndian.PutUint32(b[off:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(b[off+4:], uint32(len(p[1])))
		off += 8
	}
	for _, p := range pairs {
		off += copy(b[off:], p[0])
		b[off] = 0
		off++
		off += copy(b[off:], p[1])
		b[off] = 0
		off++
	}
	return b
}

// EncodePairs is the proxy-wasm pairs encoding (exported for tests of guests).
func EncodePairs(pairs [][2]string) []byte {
	v := &vm{}
	return append([]byte(nil), v.encodePairs(pairs)...)
}

// DecodePairs parses the pairs encoding; malformed input gives ok=false.
func DecodePairs(b []byte) ([][2]string, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if len(b) < 4 {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n)*8+4 > uint64(len(b)) {
		return nil, false
	}
	sizes := b[4 : 4+n*8]
	data := b[4+n*8:]
	out := make([][2]string, 0, n)
	for i := uint32(0); i < n; i++ {
		kl := uint64(binary.LittleEndian.Uint32(sizes[i*8:]))
		vl := uint64(binary.LittleEndian.Uint32(sizes[i*8+4:]))
		if kl+1+vl+1 > uint64(len(data)) {
			return nil, false
		}
		k := string(data[:kl])
		val := string(data[kl+1 : kl+1+vl])
		data = data[kl+1+vl+1:]
		out = append(out, [2]string{k, val})
	}
	return out, true
}

// headerMap returns the map of type t if the running callback may use it.
// writable is false for http call responses.
func (v *vm) headerMap(t uint32) (m *[][2]string, writable bool) {
	switch t {
	case mapGrpcInitialMetadata, mapGrpcTrailingMetadata:
		if v.scope.grpcMetadata == nil || v.scope.grpcMapType != t {
			return nil, false
		}
		return v.scope.grpcMetadata, false
	case mapHTTPCallRespHeaders, mapHTTPCallRespTrailers:
		if v.scope.httpCall == nil {
			return nil, false
		}
		if t == mapHTTPCallRespHeaders {
			return &v.scope.httpCall.Headers, false
		}
		return &v.scope.httpCall.Trailers, false
	}
	st := v.stream()
	if st == nil {
		return nil, false
	}
	switch t {
	case mapRequestHeaders:
		return &st.reqHeaders, true
	case mapRequestTrailers:
		if st.reqTrailers == nil {
			return nil, false
		}
		return &st.reqTrailers, true
	case mapResponseHeaders:
		if !st.hasResponse {
			return nil, false
		}
		return &st.respHeaders, true
	case mapResponseTrailers:
		if !st.hasResponse || st.respTrailers == nil {
			return nil, false
		}
		return &st.respTrailers, true
	}
	return nil, false
}

// headersWritten follows a write to header map t: a request header write
// clears the stream's route cache, as in Envoy's Wasm filter.
func (v *vm) headersWritten(t uint32) {
	if st := v.stream(); st != nil && t == mapRequestHeaders {
		st.clearRouteCache()
	}
}

func (v *vm) buffer(t uint32) (*[]byte, bool) {
	switch t {
	case bufVMConfiguration:
		if v.scope.vmConfig {
			return &v.p.cfg.VMConfiguration, true
		}
	case bufPluginConfig:
		if v.scope.pluginConfig {
			return &v.p.cfg.Configuration, true
		}
	case bufHTTPCallResponse:
		if v.scope.httpCall != nil {
			return &v.scope.httpCall.Body, true
		}
	case bufGrpcReceive:
		if v.scope.grpcMessage != nil {
			return v.scope.grpcMessage, true
		}
	case bufRequestBody:
		if st := v.stream(); st != nil && st.reqBodyReadable {
			return &st.reqBody, true
		}
	case bufResponseBody:
		if st := v.stream(); st != nil && st.respBodyReadable {
			return &st.respBody, true
		}
	}
	return nil, false
}

func envFuncs() []hostFunc {
	return []hostFunc{
		{name: "proxy_log", params: sig(3), results: oneI32, fn: hLog},
		{name: "proxy_get_log_level", params: sig(1), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			wrote(s, v.mem.WriteUint32Le(uint32(s[0]), uint32(v.p.rt.logLevel)))
		}},
		{name: "proxy_get_property", params: sig(4), results: oneI32, fn: hGetProperty},
		{name: "proxy_set_property", params: sig(4), results: oneI32, fn: hSetProperty},
		{name: "proxy_continue_stream", params: sig(1), results: oneI32, fn: hContinueStream},
		{name: "proxy_close_stream", params: sig(1), results: oneI32, fn: hCloseStream},
		{name: "proxy_send_local_response", params: sig(8), results: oneI32, fn: hSendLocalResponse},
		{name: "proxy_get_shared_data", params: sig(5), results: oneI32, fn: hGetSharedData},
		{name: "proxy_set_shared_data", params: sig(5), results: oneI32, fn: hSetSharedData},
		{name: "proxy_register_shared_queue", params: sig(3), results: oneI32, fn: hRegisterQueue},
		{name: "proxy_resolve_shared_queue", params: sig(5), results: oneI32, fn: hResolveQueue},
		{name: "proxy_dequeue_shared_queue", params: sig(3), results: oneI32, fn: hDequeue},
		{name: "proxy_enqueue_shared_queue", params: sig(3), results: oneI32, fn: hEnqueue},
		{name: "proxy_get_header_map_value", params: sig(5), results: oneI32, fn: hGetHeader},
		{name: "proxy_add_header_map_value", params: sig(5), results: oneI32, fn: hAddHeader},
		{name: "proxy_replace_header_map_value", params: sig(5), results: oneI32, fn: hReplaceHeader},
		{name: "proxy_remove_header_map_value", params: sig(3), results: oneI32, fn: hRemoveHeader},
		{name: "proxy_get_header_map_pairs", params: sig(3), results: oneI32, fn: hGetPairs},
		{name: "proxy_set_header_map_pairs", params: sig(3), results: oneI32, fn: hSetPairs},
		{name: "proxy_get_header_map_size", params: sig(2), results: oneI32, fn: hGetMapSize},
		{name: "proxy_get_buffer_status", params: sig(3), results: oneI32, fn: hGetBufferStatus},
		{name: "proxy_get_buffer_bytes", params: sig(5), results: oneI32, fn: hGetBuffer},
		{name: "proxy_set_buffer_bytes", params: sig(5), results: oneI32, fn: hSetBuffer},
		{name: "proxy_http_call", params: sig(10), results: oneI32, fn: hHTTPCall},
		{name: "proxy_grpc_call", params: sig(12), results: oneI32, fn: hGrpcCall},
		{name: "proxy_grpc_stream", params: sig(9), results: oneI32, fn: hGrpcStream},
		{name: "proxy_grpc_cancel", params: sig(1), results: oneI32, fn: hGrpcCancel},
		{name: "proxy_grpc_close", params: sig(1), results: oneI32, fn: hGrpcClose},
		{name: "proxy_grpc_send", params: sig(4), results: oneI32, fn: hGrpcSend},
		{name: "proxy_get_status", params: sig(3), results: oneI32, fn: hGetStatus},
		{name: "proxy_set_tick_period_milliseconds", params: sig(1), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			v.setTick(time.Duration(uint32(s[0])) * time.Millisecond)
			ok(s, StatusOK)
		}},
		{name: "proxy_get_current_time_nanoseconds", params: sig(1), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			wrote(s, v.mem.WriteUint64Le(uint32(s[0]), uint64(time.Now().UnixNano())))
		}},
		{name: "proxy_define_metric", params: sig(4), results: oneI32, fn: hDefineMetric},
		{name: "proxy_increment_metric", params: []api.ValueType{i32, i64}, results: oneI32, fn: hIncrementMetric},
		{name: "proxy_record_metric", params: []api.ValueType{i32, i64}, results: oneI32, fn: hRecordMetric},
		{name: "proxy_get_metric", params: sig(2), results: oneI32, fn: hGetMetric},
		{name: "proxy_set_effective_context", params: sig(1), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) {
			id := uint32(s[0])
			if id != rootContextID && v.streams[id] == nil {
				ok(s, StatusBadArgument)
				return
			}
			v.effective = id
			ok(s, StatusOK)
		}},
		{name: "proxy_done", params: nil, results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) { ok(s, StatusNotFound) }},
		{name: "proxy_call_foreign_function", params: sig(6), results: oneI32, fn: hForeignFunction},
		// Registered by cpp-host for emscripten-built modules.
		{name: "pthread_equal", params: sig(2), results: oneI32, fn: func(v *vm, _ context.Context, s []uint64) { s[0] = b2u(uint32(s[0]) == uint32(s[1])) }},
		{name: "emscripten_notify_memory_growth", params: sig(1), fn: func(*vm, context.Context, []uint64) {}},
		// ABI 0.2.x stream control.
	}
}

// hForeignFunction serves the one foreign function Sluice calls, Envoy's
// clear_route_cache (source/extensions/common/wasm/foreign.cc): it clears
// the route cache of the stream in context, returns nothing, and succeeds
// in a root context too, where there is no route. Any other name is
// NotFound, as for a function Envoy does not register.
func hForeignFunction(v *vm, _ context.Context, s []uint64) {
	name, good := v.readString(uint32(s[0]), uint32(s[1]))
	switch {
	case !good:
		ok(s, StatusInvalidMemoryAccess)
	case name != "clear_route_cache":
		ok(s, StatusNotFound)
	default:
		if st := v.stream(); st != nil {
			st.clearRouteCache()
		}
		ok(s, StatusOK)
	}
}

func hLog(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	level := uint32(s[0])
	a.check(level <= uint32(LogCritical), StatusBadArgument)
	msg := a.string(1)
	if a.failed() {
		return
	}
	v.p.rt.log(LogLevel(level), v.p.cfg.Name, msg)
	ok(s, StatusOK)
}

func hContinueStream(v *vm, _ context.Context, s []uint64) {
	st := v.streamOrNotFound(s)
	if st == nil {
		return
	}
	var want phase
	switch uint32(s[0]) {
	case 0:
		want = phaseRequest
	case 1:
		want = phaseResponse
	default:
		ok(s, StatusBadArgument)
		return
	}
	if st.paused == want {
		st.paused = phaseNone
		v.syncParked(st)
		st.signal()
	} else if st.phase == want && v.current == st.id {
		// Continue from inside the stream's own callback: remembered so a
		// Pause returned by that callback does not park the stream.
		st.pendingResume = true
	}
	ok(s, StatusOK)
}

func hCloseStream(v *vm, _ context.Context, s []uint64) {
	st := v.streamOrNotFound(s)
	if st == nil {
		return
	}
	st.reset = true
	v.syncParked(st)
	st.signal()
	ok(s, StatusOK)
}

func hSendLocalResponse(v *vm, _ context.Context, s []uint64) {
	st := v.streamOrNotFound(s)
	if st == nil {
		return
	}
	code := uint32(s[0])
	a := v.args(s)
	details, body, hdrBytes := a.string(1), a.bytes(3), a.bytes(5)
	headers, good := DecodePairs(hdrBytes)
	a.check(good, StatusBadArgument)
	// Envoy sends at most one local reply per stream.
	a.check(!st.localSent && st.local == nil, StatusBadArgument)
	if a.failed() {
		return
	}
	st.local = &localReply{status: int(code), details: details, body: append([]byte(nil), body...), headers: headers}
	st.paused = phaseNone
	v.syncParked(st)
	st.signal()
	ok(s, StatusOK)
}

func hGetHeader(v *vm, ctx context.Context, s []uint64) {
	m := v.headerMapOrBad(s, false)
	if m == nil {
		return
	}
	a := v.args(s)
	key := lower(a.string(1))
	if a.failed() {
		return
	}
	// Envoy returns the first value only (a known ABI limitation, see the
	// TODO in Envoy's Context::getHeaderMapValue).
	val, found := headerValue(*m, key)
	if !found {
		ok(s, StatusNotFound)
		return
	}
	v.replyString(ctx, s, val, uint32(s[3]), uint32(s[4]))
}

// editHeaders serves the hostcalls that change one key of a header map:
// the map of type s[0] must be writable now, and the key at s[1] (and,
// withValue, the value at s[3]) readable; edit returns the map changed.
func (v *vm) editHeaders(s []uint64, withValue bool, edit func(m [][2]string, k, val string) [][2]string) {
	m := v.headerMapOrBad(s, true)
	if m == nil {
		return
	}
	a := v.args(s)
	k, val := lower(a.string(1)), ""
	if withValue {
		val = a.string(3)
	}
	if a.failed() {
		return
	}
	*m = edit(*m, k, val)
	v.headersWritten(uint32(s[0]))
	ok(s, StatusOK)
}

func hAddHeader(v *vm, _ context.Context, s []uint64) {
	v.editHeaders(s, true, func(m [][2]string, k, val string) [][2]string {
		return append(m, [2]string{k, val})
	})
}

func hReplaceHeader(v *vm, _ context.Context, s []uint64) {
	v.editHeaders(s, true, func(m [][2]string, k, val string) [][2]string {
		out := m[:0]
		replaced := false
		for _, h := range m {
			if h[0] == k {
				if replaced {
					continue
				}
				h[1] = val
				replaced = true
			}
			out = append(out, h)
		}
		if !replaced {
			out = append(out, [2]string{k, val})
		}
		return out
	})
}

func hRemoveHeader(v *vm, _ context.Context, s []uint64) {
	v.editHeaders(s, false, func(m [][2]string, k, _ string) [][2]string {
		out := m[:0]
		for _, h := range m {
			if h[0] != k {
				out = append(out, h)
			}
		}
		return out
	})
}

func hGetPairs(v *vm, ctx context.Context, s []uint64) {
	m, _ := v.headerMap(uint32(s[0]))
	if m == nil {
		// Unlike the single-value getter, Envoy's getHeaderMapPairs reports
		// an unavailable map as empty, with status Ok.
		v.replyBytes(ctx, s, nil, uint32(s[1]), uint32(s[2]))
		return
	}
	b := v.encodePairs(*m)
	v.replyBytes(ctx, s, b, uint32(s[1]), uint32(s[2]))
}

func hSetPairs(v *vm, _ context.Context, s []uint64) {
	m := v.headerMapOrBad(s, true)
	if m == nil {
		return
	}
	a := v.args(s)
	pairs, good := DecodePairs(a.bytes(1))
	a.check(good, StatusBadArgument)
	if a.failed() {
		return
	}
	*m = lowerPairs(pairs)
	if *m == nil {
		*m = [][2]string{}
	}
	v.headersWritten(uint32(s[0]))
	ok(s, StatusOK)
}

func hGetMapSize(v *vm, _ context.Context, s []uint64) {
	m := v.headerMapOrBad(s, false)
	if m == nil {
		return
	}
	size := 0
	for _, h := range *m {
		size += len(h[0]) + len(h[1])
	}
	wrote(s, v.mem.WriteUint32Le(uint32(s[1]), uint32(size)))
}

func hGetBufferStatus(v *vm, _ context.Context, s []uint64) {
	b, avail := v.buffer(uint32(s[0]))
	if !avail {
		ok(s, StatusNotFound)
		return
	}
	wrote(s, v.mem.WriteUint32Le(uint32(s[1]), uint32(len(*b))) && v.mem.WriteUint32Le(uint32(s[2]), 0))
}

func hGetBuffer(v *vm, ctx context.Context, s []uint64) {
	b, avail := v.buffer(uint32(s[0]))
	if !avail {
		ok(s, StatusNotFound)
		return
	}
	start, length := uint64(uint32(s[1])), uint64(uint32(s[2]))
	data := *b
	if start > uint64(len(data)) {
		ok(s, StatusBadArgument)
		return
	}
	end := start + length
	if end > uint64(len(data)) {
		end = uint64(len(data))
	}
	v.replyBytes(ctx, s, data[start:end], uint32(s[3]), uint32(s[4]))
}

func hSetBuffer(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	t := uint32(s[0])
	a.check(t == bufRequestBody || t == bufResponseBody, StatusBadArgument)
	b, avail := v.buffer(t)
	a.check(avail, StatusNotFound)
	data := a.bytes(3)
	if a.failed() {
		return
	}
	start, length := uint64(uint32(s[1])), uint64(uint32(s[2]))
	old := *b
	if start > uint64(len(old)) {
		start = uint64(len(old))
	}
	end := start + length
	if end > uint64(len(old)) {
		end = uint64(len(old))
	}
	nb := make([]byte, 0, uint64(len(old))-(end-start)+uint64(len(data)))
	nb = append(nb, old[:start]...)
	nb = append(nb, data...)
	nb = append(nb, old[end:]...)
	*b = nb
	ok(s, StatusOK)
}

func hHTTPCall(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	cluster, hb, body, tb := a.string(0), a.bytes(2), a.bytes(4), a.bytes(6)
	if a.failed() {
		return
	}
	if int32(s[8]) < 0 {
		ok(s, StatusBadArgument)
		return
	}
	timeout := time.Duration(uint32(s[8])) * time.Millisecond
	tokenPtr := uint32(s[9])
	caller := v.p.cfg.Caller
	if caller == nil || !caller.HasCluster(cluster) {
		ok(s, StatusBadArgument)
		return
	}
	headers, good := DecodePairs(hb)
	trailers, good2 := DecodePairs(tb)
	if !good || !good2 {
		ok(s, StatusBadArgument)
		return
	}
	headers = lowerPairs(headers)
	var hasMethod, hasPath, hasAuthority bool
	for _, h := range headers {
		switch h[0] {
		case ":method":
			hasMethod = h[1] != ""
		case ":path":
			hasPath = h[1] != ""
		case ":authority":
			hasAuthority = h[1] != ""
		}
	}
	if !hasMethod || !hasPath || !hasAuthority {
		ok(s, StatusBadArgument)
		return
	}
	if v.worker < 0 {
		// The canary VM is discarded right after configuration.
		ok(s, StatusInternalFailure)
		return
	}
	if len(body) > 0 {
		// Envoy sets the content length of the call's body.
		headers = append(headers, [2]string{"content-length", itoa(len(body))})
	}
	token := v.startHTTPCall(cluster, headers, append([]byte(nil), body...), lowerPairs(trailers), timeout)
	wrote(s, v.mem.WriteUint32Le(tokenPtr, token))
}

// ---- properties ----

func hGetProperty(v *vm, ctx context.Context, s []uint64) {
	a := v.args(s)
	raw := strings.TrimRight(a.string(0), "\x00")
	if a.failed() {
		return
	}
	var val []byte
	var found bool
	if rest, isMeta := strings.CutPrefix(raw, "metadata\x00filter_metadata\x00"); isMeta {
		// Segments are kept apart: a namespace holds dots of its own.
		if st := v.stream(); st != nil {
			val, found = metadataProperty(st.req.DynamicMetadata, strings.Split(rest, "\x00"))
		}
	} else {
		val, found = v.property(strings.ReplaceAll(raw, "\x00", "."))
	}
	if !found {
		ok(s, StatusNotFound)
		return
	}
	v.replyBytes(ctx, s, val, uint32(s[2]), uint32(s[3]))
}

func hSetProperty(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	pb, val := a.bytes(0), a.bytes(2)
	if a.failed() {
		return
	}
	st := v.streamOrNotFound(s)
	if st == nil {
		return
	}
	if st.props == nil {
		st.props = map[string][]byte{}
	}
	st.props[strings.ReplaceAll(string(pb), "\x00", ".")] = append([]byte(nil), val...)
	ok(s, StatusOK)
}

func int64Bytes(n int64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(n))
	return b
}

// joinedHeader is every value of header key in hs, in order, joined with
// ','; absent when there is none.
func joinedHeader(hs [][2]string, key string) ([]byte, bool) {
	var out []byte
	found := false
	for _, h := range hs {
		if h[0] != key {
			continue
		}
		if found {
			out = append(out, ',')
		}
		out, found = append(out, h[1]...), true
	}
	return out, found
}

func headerValue(hs [][2]string, key string) (string, bool) {
	for _, h := range hs {
		if h[0] == key {
			return h[1], true
		}
	}
	return "", false
}

// property implements the Envoy attributes the host knows, with Envoy's
// encodings: strings raw, integers 8-byte little-endian, maps as pairs.
func (v *vm) property(path string) ([]byte, bool) {
	cfg := &v.p.cfg
	switch path {
	case "plugin_name":
		return []byte(cfg.Name), true
	case "plugin_root_id":
		return []byte(cfg.RootID), true
	case "plugin_vm_id":
		return []byte(cfg.VMID), true
	}
	st := v.stream()
	if st == nil {
		return nil, false
	}
	if val, ok := st.props[path]; ok {
		return val, true
	}
	str := func(s string, ok bool) ([]byte, bool) {
		if !ok {
			return nil, false
		}
		return []byte(s), true
	}
	if name, ok := strings.CutPrefix(path, "request.headers."); ok {
		// One header of Envoy's request.headers map: every value, joined
		// with ',' (HeadersWrapper's getAllOfHeaderAsString), where
		// proxy_get_header_map_value gives only the first.
		return joinedHeader(st.reqHeaders, lower(name))
	}
	switch path {
	case "source.address":
		return str(st.req.SourceAddress, st.req.SourceAddress != "")
	case "destination.address":
		return str(st.req.DestinationAddress, st.req.DestinationAddress != "")
	case "request.path":
		return str(headerValue(st.reqHeaders, ":path"))
	case "request.url_path":
		p, ok := headerValue(st.reqHeaders, ":path")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		return str(p, ok)
	case "request.method":
		return str(headerValue(st.reqHeaders, ":method"))
	case "request.host":
		return str(headerValue(st.reqHeaders, ":authority"))
	case "request.scheme":
		return str(headerValue(st.reqHeaders, ":scheme"))
	case "request.id":
		return str(headerValue(st.reqHeaders, "x-request-id"))
	case "request.protocol":
		return []byte("HTTP/1.1"), true
	case "request.headers":
		return append([]byte(nil), v.encodePairs(st.reqHeaders)...), true
	case "response.headers":
		if !st.hasResponse {
			return nil, false
		}
		return append([]byte(nil), v.encodePairs(st.respHeaders)...), true
	case "response.code":
		if !st.hasResponse {
			return nil, false
		}
		code, _ := headerValue(st.respHeaders, ":status")
		n := 0
		for _, c := range code {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
		}
		return int64Bytes(int64(n)), true
	case "response.code_details":
		return str(st.details, st.hasResponse && st.details != "")
	case "xds.cluster_name":
		_, c := st.route()
		return str(c, c != "")
	case "xds.route_name":
		r, _ := st.route()
		return str(r, r != "")
	}
	return nil, false
}
