package host

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// GrpcCaller is a Caller whose clusters also take gRPC callouts
// (proxy_grpc_call, proxy_grpc_stream). GrpcEndpoint picks the endpoint
// the next callout to cluster goes to, as the cluster's load balancer would.
type GrpcCaller interface {
	GrpcEndpoint(cluster string) (network, address string, ok bool)
}

// Callout tokens as Envoy numbers them (Wasm::nextGrpcCallId and
// nextGrpcStreamId): the low two bits are the callout type, so a token
// alone says whether it is a call or a stream.
const (
	calloutTypeMask   = 3
	calloutIncrement  = 4
	calloutGrpcCall   = 1
	calloutGrpcStream = 2
)

// Map and buffer types gRPC callbacks can read.
const (
	mapGrpcInitialMetadata  = 4
	mapGrpcTrailingMetadata = 5
	bufGrpcReceive          = 5
)

// grpcCallout is one pending proxy_grpc_call or proxy_grpc_stream. The
// loop owns the vm's map of them: a callout no longer in the map (cancelled,
// closed, finished) gets no callback, whatever its goroutines still post.
type grpcCallout struct {
	cancel context.CancelFunc
	// For streams: messages and the half close go through sender, in order,
	// so proxy_grpc_send never waits for flow control on the loop.
	sender       *grpcSender
	localClosed  bool
	remoteClosed bool
}

// grpcStatusScope is what proxy_get_status reports inside
// proxy_on_grpc_close.
type grpcStatusScope struct {
	code uint32
	msg  string
}

// rawCodec passes messages through as the bytes the plugin gave, as Envoy's
// sendRaw does.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// grpcConns keeps one HTTP/2 connection per endpoint for a plugin, as
// Envoy's per-cluster connection pools do.
type grpcConns struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (g *grpcConns) get(network, address string) (*grpc.ClientConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := network + "|" + address
	if c := g.conns[key]; c != nil {
		return c, nil
	}
	var d net.Dialer
	c, err := grpc.NewClient("passthrough:///"+address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, err
	}
	if g.conns == nil {
		g.conns = map[string]*grpc.ClientConn{}
	}
	g.conns[key] = c
	return c, nil
}

func (g *grpcConns) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, c := range g.conns {
		_ = c.Close()
		delete(g.conns, k)
	}
}

// parseGrpcService reads the cluster of a serialized
// envoy.config.core.v3.GrpcService (envoy_grpc = 1 { cluster_name = 1 })
// and its initial_metadata (5, HeaderValue{key = 1, value = 2}).
// isProto is false for bytes that are not a well-formed message, which
// Envoy then takes for a cluster name.
func parseGrpcService(b []byte) (cluster string, md [][2]string, isProto bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", nil, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", nil, false
		}
		b = b[n:]
		switch num {
		case 1:
			f, ok := bytesFields(v)
			if !ok {
				return "", nil, false
			}
			cluster = f[1]
		case 5:
			f, ok := bytesFields(v)
			if !ok {
				return "", nil, false
			}
			md = append(md, [2]string{strings.ToLower(f[1]), f[2]})
		}
	}
	return cluster, md, true
}

// bytesFields is the last value of each length-delimited field 1 and 2 of
// a message; other fields are skipped.
func bytesFields(b []byte) (f [3]string, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return f, false
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return f, false
			}
			f[num] = string(v)
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return f, false
		}
		b = b[m:]
	}
	return f, true
}

// grpcTarget resolves the service argument of proxy_grpc_call/stream as
// Envoy's Context::grpcCall does: a GrpcService proto naming an
// envoy_grpc cluster, or else the bytes are the cluster name.
func (v *vm) grpcTarget(service []byte) (network, address string, md [][2]string, st Status) {
	gc, _ := v.p.cfg.Caller.(GrpcCaller)
	cluster, md, isProto := parseGrpcService(service)
	if !isProto {
		cluster = string(service)
		if gc == nil || !v.p.cfg.Caller.HasCluster(cluster) {
			// Envoy keeps ParseFailure here for ABI 0.1 callers.
			return "", "", nil, StatusParseFailure
		}
	}
	if gc == nil || cluster == "" || !v.p.cfg.Caller.HasCluster(cluster) {
		return "", "", nil, StatusBadArgument
	}
	network, address, ok := gc.GrpcEndpoint(cluster)
	if !ok {
		return "", "", nil, StatusBadArgument
	}
	return network, address, md, StatusOK
}

func (v *vm) nextGrpcToken(kind uint32) uint32 {
	if kind == calloutGrpcCall {
		v.grpcCallID += calloutIncrement
		return v.grpcCallID
	}
	v.grpcStreamID += calloutIncrement
	return v.grpcStreamID
}

func grpcContext(ctx context.Context, md [][2]string) context.Context {
	if len(md) == 0 {
		return ctx
	}
	kv := make([]string, 0, 2*len(md))
	for _, p := range md {
		kv = append(kv, strings.ToLower(p[0]), p[1])
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// startGrpcCall is Envoy's unary callout (AsyncClient::sendRaw): the
// reply reaches proxy_on_grpc_receive alone, a failure (including the
// timeout, DEADLINE_EXCEEDED) reaches proxy_on_grpc_close alone.
func (v *vm) startGrpcCall(network, address, path string, md [][2]string, msg []byte, timeout time.Duration) (uint32, Status) {
	conn, err := v.p.grpc.get(network, address)
	if err != nil {
		return 0, StatusInternalFailure
	}
	token := v.nextGrpcToken(calloutGrpcCall)
	ctx, cancel := context.WithCancel(grpcContext(v.ctx, md))
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(grpcContext(v.ctx, md), timeout)
	}
	v.grpcCallouts[token] = &grpcCallout{cancel: cancel}
	w := v.p.workers[v.worker]
	v.p.wg.Add(1)
	go func() {
		defer v.p.wg.Done()
		defer cancel()
		var reply []byte
		err := conn.Invoke(ctx, path, &msg, &reply)
		if err != nil {
			s := status.Convert(err)
			v.postGrpc(w, token, func() { v.grpcClose(token, uint32(s.Code()), s.Message()) })
			return
		}
		v.postGrpc(w, token, func() { v.grpcReceive(token, reply) })
	}()
	return token, StatusOK
}

// startGrpcStream is Envoy's AsyncClient::startRaw: initial metadata, each
// message, trailing metadata and the close, in that order, to the root
// context.
func (v *vm) startGrpcStream(network, address, path string, md [][2]string) (uint32, Status) {
	conn, err := v.p.grpc.get(network, address)
	if err != nil {
		return 0, StatusInternalFailure
	}
	token := v.nextGrpcToken(calloutGrpcStream)
	ctx, cancel := context.WithCancel(grpcContext(v.ctx, md))
	c := &grpcCallout{cancel: cancel, sender: newGrpcSender()}
	v.grpcCallouts[token] = c
	w := v.p.workers[v.worker]
	v.p.wg.Add(1)
	go func() {
		defer v.p.wg.Done()
		defer cancel()
		// Opening the stream waits for the connection; it happens here,
		// off the loop, as Envoy's startRaw never blocks the worker.
		desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
		cs, err := conn.NewStream(ctx, desc, path)
		if err != nil {
			s := status.Convert(err)
			v.postGrpc(w, token, func() { v.grpcClose(token, uint32(s.Code()), s.Message()) })
			return
		}
		v.p.wg.Add(1)
		go func() {
			defer v.p.wg.Done()
			c.sender.run(ctx, cs)
		}()
		hdr, herr := cs.Header()
		if herr == nil {
			v.postGrpc(w, token, func() { v.grpcMetadata(token, mapGrpcInitialMetadata, pairsOf(hdr)) })
		}
		for {
			var m []byte
			if err := cs.RecvMsg(&m); err != nil {
				s := status.Convert(err)
				if errors.Is(err, io.EOF) {
					s = status.New(codes.OK, "")
				}
				var tr [][2]string
				if herr == nil {
					tr = pairsOf(cs.Trailer())
				}
				// One task, so that nothing runs between the trailers and
				// the close but what the plugin does in the first.
				v.postGrpc(w, token, func() {
					if herr == nil {
						v.grpcMetadata(token, mapGrpcTrailingMetadata, tr)
						if v.failed || v.grpcCallouts[token] == nil {
							return
						}
					}
					v.grpcClose(token, uint32(s.Code()), s.Message())
				})
				return
			}
			v.postGrpc(w, token, func() { v.grpcReceive(token, m) })
		}
	}()
	return token, StatusOK
}

func pairsOf(md metadata.MD) [][2]string {
	out := make([][2]string, 0, len(md))
	for k, vs := range md {
		for _, val := range vs {
			out = append(out, [2]string{k, val})
		}
	}
	return out
}

// postGrpc runs f on the worker's loop if the callout is still live
// there and the VM can take callbacks.
func (v *vm) postGrpc(w *worker, token uint32, f func()) {
	w.loop.post(taskFunc(func() {
		if w.vm != v || v.failed || v.closed || v.grpcCallouts[token] == nil {
			return
		}
		f()
	}))
}

func (v *vm) grpcReceive(token uint32, msg []byte) {
	if token&calloutTypeMask == calloutGrpcCall {
		// A unary reply ends the call (Context::onGrpcReceive).
		delete(v.grpcCallouts, token)
	}
	v.scope = callScope{grpcMessage: &msg}
	v.call(rootContextID, v.fnGrpcReceive, rootContextID, uint64(token), uint64(len(msg)))
	v.scope = callScope{}
}

func (v *vm) grpcMetadata(token uint32, mapType uint32, md [][2]string) {
	v.scope = callScope{grpcMetadata: &md, grpcMapType: mapType}
	fn := v.fnGrpcInitial
	if mapType == mapGrpcTrailingMetadata {
		fn = v.fnGrpcTrailing
	}
	v.call(rootContextID, fn, rootContextID, uint64(token), uint64(len(md)))
	v.scope = callScope{}
}

// grpcClose delivers the end of a callout. A stream the plugin has not
// closed stays known (remote closed) until proxy_grpc_close, as in Envoy.
func (v *vm) grpcClose(token, code uint32, msg string) {
	c := v.grpcCallouts[token]
	if token&calloutTypeMask == calloutGrpcCall || c.localClosed {
		delete(v.grpcCallouts, token)
	} else {
		c.remoteClosed = true
	}
	v.scope = callScope{grpcStatus: &grpcStatusScope{code: code, msg: msg}}
	v.call(rootContextID, v.fnGrpcClose, rootContextID, uint64(token), uint64(code))
	v.scope = callScope{}
}

// grpcSender writes a stream's messages off the loop, in order.
type grpcSender struct {
	mu    sync.Mutex
	queue []grpcSend
	wake  chan struct{}
}

type grpcSend struct {
	msg    []byte
	hasMsg bool // false: only the half close
	end    bool
}

func newGrpcSender() *grpcSender { return &grpcSender{wake: make(chan struct{}, 1)} }

func (s *grpcSender) push(m grpcSend) {
	s.mu.Lock()
	s.queue = append(s.queue, m)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *grpcSender) run(ctx context.Context, cs grpc.ClientStream) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, m := range q {
			if m.hasMsg {
				msg := m.msg
				if cs.SendMsg(&msg) != nil {
					return
				}
			}
			if m.end {
				_ = cs.CloseSend()
				return
			}
		}
	}
}

// ---- hostcalls ----

// grpcArgs reads what proxy_grpc_call and proxy_grpc_stream share: the
// service, the path "/<service_name>/<method_name>" and the initial
// metadata (the GrpcService's first, then the plugin's).
func (v *vm) grpcArgs(s []uint64) (network, address, path string, md [][2]string, st Status) {
	service, ok1 := v.read(uint32(s[0]), uint32(s[1]))
	name, ok2 := v.readString(uint32(s[2]), uint32(s[3]))
	method, ok3 := v.readString(uint32(s[4]), uint32(s[5]))
	mdb, ok4 := v.read(uint32(s[6]), uint32(s[7]))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return "", "", "", nil, StatusInvalidMemoryAccess
	}
	network, address, md, st = v.grpcTarget(service)
	if st != StatusOK {
		return "", "", "", nil, st
	}
	pairs, good := DecodePairs(mdb)
	if !good {
		return "", "", "", nil, StatusBadArgument
	}
	if v.worker < 0 {
		// The canary VM is discarded right after configuration.
		return "", "", "", nil, StatusInternalFailure
	}
	return network, address, "/" + name + "/" + method, append(md, pairs...), StatusOK
}

func hGrpcCall(v *vm, _ context.Context, s []uint64) {
	network, address, path, md, st := v.grpcArgs(s)
	msg, good := v.read(uint32(s[8]), uint32(s[9]))
	if st == StatusOK && !good {
		st = StatusInvalidMemoryAccess
	}
	if st != StatusOK {
		ok(s, st)
		return
	}
	timeout := time.Duration(uint32(s[10])) * time.Millisecond
	token, st := v.startGrpcCall(network, address, path, md, append([]byte(nil), msg...), timeout)
	if st != StatusOK {
		ok(s, st)
		return
	}
	wrote(s, v.mem.WriteUint32Le(uint32(s[11]), token))
}

func hGrpcStream(v *vm, _ context.Context, s []uint64) {
	network, address, path, md, st := v.grpcArgs(s)
	if st != StatusOK {
		ok(s, st)
		return
	}
	token, st := v.startGrpcStream(network, address, path, md)
	if st != StatusOK {
		ok(s, st)
		return
	}
	wrote(s, v.mem.WriteUint32Le(uint32(s[8]), token))
}

// hGrpcSend is Context::grpcSend: BadArgument for a call token, NotFound
// for an unknown stream.
func hGrpcSend(v *vm, _ context.Context, s []uint64) {
	token := uint32(s[0])
	if token&calloutTypeMask != calloutGrpcStream {
		ok(s, StatusBadArgument)
		return
	}
	c := v.grpcCallouts[token]
	if c == nil {
		ok(s, StatusNotFound)
		return
	}
	msg, good := v.read(uint32(s[1]), uint32(s[2]))
	if !good {
		ok(s, StatusInvalidMemoryAccess)
		return
	}
	c.sender.push(grpcSend{msg: append([]byte{}, msg...), hasMsg: true, end: uint32(s[3]) != 0})
	ok(s, StatusOK)
}

// calloutOrNotFound is the callout whose token is the hostcall's first
// argument, or nil after answering NotFound.
func (v *vm) calloutOrNotFound(s []uint64) (uint32, *grpcCallout) {
	token := uint32(s[0])
	c := v.grpcCallouts[token]
	if c == nil {
		ok(s, StatusNotFound)
	}
	return token, c
}

// hGrpcCancel is Context::grpcCancel: the call or stream is reset and
// forgotten; the plugin gets no callback for it afterwards.
func hGrpcCancel(v *vm, _ context.Context, s []uint64) {
	token, c := v.calloutOrNotFound(s)
	if c == nil {
		return
	}
	delete(v.grpcCallouts, token)
	c.cancel()
	ok(s, StatusOK)
}

// hGrpcClose is Context::grpcClose. A call is cancelled. A stream is
// half-closed (end of stream sent); it stays known, and its replies and
// close still arrive, until the server closes it too; a stream the server
// already closed is forgotten.
func hGrpcClose(v *vm, _ context.Context, s []uint64) {
	token, c := v.calloutOrNotFound(s)
	if c == nil {
		return
	}
	if token&calloutTypeMask == calloutGrpcCall || c.remoteClosed {
		delete(v.grpcCallouts, token)
		c.cancel()
		ok(s, StatusOK)
		return
	}
	if !c.localClosed {
		c.localClosed = true
		c.sender.push(grpcSend{end: true})
	}
	ok(s, StatusOK)
}

// hGetStatus is proxy_get_status: the gRPC status code and message, inside
// proxy_on_grpc_close.
func hGetStatus(v *vm, ctx context.Context, s []uint64) {
	gs := v.scope.grpcStatus
	if gs == nil {
		ok(s, StatusNotFound)
		return
	}
	if !v.mem.WriteUint32Le(uint32(s[0]), gs.code) {
		ok(s, StatusInvalidMemoryAccess)
		return
	}
	v.replyString(ctx, s, gs.msg, uint32(s[1]), uint32(s[2]))
}
