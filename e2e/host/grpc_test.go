package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// grpcTestServer is a real gRPC server on 127.0.0.1 that serves any
// method with raw bytes:
//
//	/t.S/Echo   replies "echo:<msg>|<x-in metadata>" with initial
//	            metadata x-reply and trailing metadata x-trail
//	/t.S/Fail   fails with the status code the message spells in decimal
//	/t.S/Hang   waits for the client to go away and reports why on gone
//	/t.S/Chat   sends initial metadata, echoes each message, ends with OK
//	            and trailing metadata once the client half-closes
//	/t.S/Reset  reads one message, then drops the connection before
//	            sending any response
type grpcTestServer struct {
	srv     *grpc.Server
	addr    string
	entered chan string // method name, when a handler starts
	gone    chan error  // Hang/Chat: the stream context's error when the client left

	mu    sync.Mutex
	conns map[string]net.Conn // by remote address
}

type trackingListener struct {
	net.Listener
	s *grpcTestServer
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.s.mu.Lock()
		l.s.conns[c.RemoteAddr().String()] = c
		l.s.mu.Unlock()
	}
	return c, err
}

func startGrpcServer(t *testing.T) *grpcTestServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpcTestServer{addr: ln.Addr().String(), entered: make(chan string, 64), gone: make(chan error, 16), conns: map[string]net.Conn{}}
	s.srv = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(s.handle))
	go func() { _ = s.srv.Serve(trackingListener{ln, s}) }()
	t.Cleanup(s.srv.Stop)
	return s
}

func (s *grpcTestServer) handle(_ any, st grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(st)
	s.entered <- method
	ctx := st.Context()
	switch method {
	case "/t.S/Echo":
		var m []byte
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(ctx)
		if err := st.SendHeader(metadata.Pairs("x-reply", "yes")); err != nil {
			return err
		}
		st.SetTrailer(metadata.Pairs("x-trail", "t"))
		out := []byte("echo:" + string(m) + "|" + strings.Join(md.Get("x-in"), ","))
		return st.SendMsg(&out)
	case "/t.S/Fail":
		var m []byte
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		var code int
		fmt.Sscan(string(m), &code)
		return status.Errorf(codes.Code(code), "failed with %d", code)
	case "/t.S/Hang":
		<-ctx.Done()
		s.gone <- ctx.Err()
		return ctx.Err()
	case "/t.S/Chat":
		if err := st.SendHeader(metadata.Pairs("x-chat", "hi")); err != nil {
			return err
		}
		for {
			var m []byte
			err := st.RecvMsg(&m)
			if errors.Is(err, io.EOF) {
				st.SetTrailer(metadata.Pairs("x-trail", "bye"))
				return nil
			}
			if err != nil {
				s.gone <- ctx.Err()
				return err
			}
			out := append([]byte("re:"), m...)
			if err := st.SendMsg(&out); err != nil {
				return err
			}
		}
	case "/t.S/Reset":
		var m []byte
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		p, _ := peer.FromContext(ctx)
		s.mu.Lock()
		c := s.conns[p.Addr.String()]
		s.mu.Unlock()
		_ = c.Close()
		<-ctx.Done()
		return ctx.Err()
	}
	return status.Error(codes.Unimplemented, method)
}

// grpcCallers resolves clusters for the host: "grpc" is the test server.
type grpcCallers struct{ addr string }

func (c grpcCallers) HasCluster(name string) bool { return name == "grpc" }
func (c grpcCallers) Call(context.Context, string, [][2]string, []byte, [][2]string, time.Duration) (*Response, error) {
	return nil, errors.New("no http")
}
func (c grpcCallers) GrpcEndpoint(name string) (string, string, bool) {
	return "tcp", c.addr, name == "grpc"
}

// grpcEvent is one gRPC callback the guest saw: I initial metadata, M
// message, T trailing metadata, S proxy_get_status in on_grpc_close (arg
// is its code), C on_grpc_close (arg is the status_code parameter).
type grpcEvent struct {
	tag   byte
	token uint32
	arg   uint32 // I/T: number of entries; M: size
	data  string // I/T: the pairs, decoded; M: message; S: status message
}

func (e grpcEvent) String() string { return fmt.Sprintf("%c%d(%d %q)", e.tag, e.token, e.arg, e.data) }

// grpcGuest drives proxy_grpc_* from a WAT guest: each t_* export hands
// its arguments to the hostcall of the same name and returns its status;
// every gRPC callback logs what it can read.
type grpcGuest struct {
	t      *testing.T
	p      *Plugin
	events chan grpcEvent
	off    uint32 // next free byte of the test's area of guest memory
}

func grpcGuestModule(t *testing.T) []byte {
	params := func(n int) (decl, args string) {
		for i := range n {
			decl += " i32"
			args += fmt.Sprintf(" (local.get %d)", i)
		}
		return
	}
	fwd := func(export, imp string, n int) string {
		d, a := params(n)
		return fmt.Sprintf("  (func (export %q) (param%s) (result i32) (call %s%s))\n", export, d, imp, a)
	}
	return watModule{
		memory: `(memory (export "memory") 8)`,
		imports: `
  (import "env" "proxy_grpc_call" (func $gcall (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_stream" (func $gstream (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_send" (func $gsend (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_grpc_cancel" (func $gcancel (param i32) (result i32)))
  (import "env" "proxy_grpc_close" (func $gclose (param i32) (result i32)))
  (import "env" "proxy_get_status" (func $status (param i32 i32 i32) (result i32)))`,
		extra: fwd("t_call", "$gcall", 12) + fwd("t_stream", "$gstream", 9) + fwd("t_send", "$gsend", 4) +
			fwd("t_cancel", "$gcancel", 1) + fwd("t_close", "$gclose", 1) + `
  (func $emit (param $tag i32) (param $token i32) (param $arg i32) (param $p i32) (param $n i32) (local $b i32)
    (local.set $b (call $bump (i32.add (local.get $n) (i32.const 9))))
    (i32.store8 (local.get $b) (local.get $tag))
    (i32.store (i32.add (local.get $b) (i32.const 1)) (local.get $token))
    (i32.store (i32.add (local.get $b) (i32.const 5)) (local.get $arg))
    (memory.copy (i32.add (local.get $b) (i32.const 9)) (local.get $p) (local.get $n))
    (call $say (local.get $b) (i32.add (local.get $n) (i32.const 9))))
  (func $clear (i32.store (i32.const 7400) (i32.const 0)) (i32.store (i32.const 7404) (i32.const 0)))
  (func (export "proxy_on_grpc_receive_initial_metadata") (param $root i32) (param $token i32) (param $n i32)
    (call $clear) (drop (call $pairs (i32.const 4) (i32.const 7400) (i32.const 7404)))
    (call $emit (i32.const 73) (local.get $token) (local.get $n) (i32.load (i32.const 7400)) (i32.load (i32.const 7404))))
  (func (export "proxy_on_grpc_receive") (param $root i32) (param $token i32) (param $n i32)
    (call $clear) (drop (call $getbuf (i32.const 5) (i32.const 0) (local.get $n) (i32.const 7400) (i32.const 7404)))
    (call $emit (i32.const 77) (local.get $token) (local.get $n) (i32.load (i32.const 7400)) (i32.load (i32.const 7404))))
  (func (export "proxy_on_grpc_receive_trailing_metadata") (param $root i32) (param $token i32) (param $n i32)
    (call $clear) (drop (call $pairs (i32.const 5) (i32.const 7400) (i32.const 7404)))
    (call $emit (i32.const 84) (local.get $token) (local.get $n) (i32.load (i32.const 7400)) (i32.load (i32.const 7404))))
  (func (export "proxy_on_grpc_close") (param $root i32) (param $token i32) (param $code i32)
    (call $clear) (i32.store (i32.const 7408) (i32.const 99))
    (drop (call $status (i32.const 7408) (i32.const 7400) (i32.const 7404)))
    (call $emit (i32.const 83) (local.get $token) (i32.load (i32.const 7408)) (i32.load (i32.const 7400)) (i32.load (i32.const 7404)))
    (call $emit (i32.const 67) (local.get $token) (local.get $code) (i32.const 0) (i32.const 0)))`,
	}.build(t)
}

const grpcTestArea = 6 << 16 // guest memory the test writes arguments to

func newGrpcGuest(t *testing.T, caller Caller) *grpcGuest {
	t.Helper()
	g := &grpcGuest{t: t, events: make(chan grpcEvent, 256), off: grpcTestArea}
	r := NewRuntime(RuntimeOptions{Logger: g.log})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	p, err := loadPlugin(t, r, grpcGuestModule(t), func(c *PluginConfig) { c.Caller = caller })
	if err != nil {
		t.Fatal(err)
	}
	g.p = p
	return g
}

func (g *grpcGuest) log(_ LogLevel, _ string, msg string) {
	if len(msg) < 9 || !strings.ContainsRune("IMTSC", rune(msg[0])) {
		return
	}
	e := grpcEvent{tag: msg[0], token: binary.LittleEndian.Uint32([]byte(msg[1:5])), arg: binary.LittleEndian.Uint32([]byte(msg[5:9])), data: msg[9:]}
	if e.tag == 'I' || e.tag == 'T' {
		pairs, ok := DecodePairs([]byte(e.data))
		if !ok {
			e.data = "malformed pairs"
		} else {
			var kv []string
			for _, p := range pairs {
				if p[0] != "content-type" {
					kv = append(kv, p[0]+"="+p[1])
				}
			}
			e.data = strings.Join(kv, ",")
		}
	}
	g.events <- e
}

// onLoop runs f on the worker's loop with its VM.
func (g *grpcGuest) onLoop(f func(v *vm)) {
	g.t.Helper()
	w := g.p.workers[0]
	if err := w.loop.do(func() { f(w.vm) }); err != nil {
		g.t.Fatal(err)
	}
}

// put copies b into guest memory; loop only.
func (g *grpcGuest) put(v *vm, b []byte) (ptr, size uint64) {
	if !v.mem.Write(g.off, b) {
		g.t.Fatalf("guest memory full")
	}
	ptr, size = uint64(g.off), uint64(len(b))
	g.off += uint32(len(b)) + 8
	return
}

// invoke calls the guest export name, which makes the hostcall; loop only.
func (g *grpcGuest) invoke(v *vm, name string, args ...uint64) Status {
	g.t.Helper()
	fn := v.mod.ExportedFunction(name)
	if fn == nil || v.failed {
		g.t.Errorf("guest cannot run %s (failed: %q)", name, v.failMsg)
		return StatusInternalFailure
	}
	// Not v.call: its stack is sized for proxy_on_* callbacks.
	v.current, v.effective = rootContextID, 0
	res, err := fn.Call(v.ctx, args...)
	v.current = vmContextID
	if err != nil {
		g.t.Errorf("%s: %v", name, err)
		return StatusInternalFailure
	}
	return Status(res[0])
}

// startCall makes proxy_grpc_call; loop only.
func (g *grpcGuest) startCall(v *vm, service []byte, method string, md [][2]string, msg []byte, timeoutMS uint32) (Status, uint32) {
	sp, sn := g.put(v, service)
	np, nn := g.put(v, []byte("t.S"))
	mp, mn := g.put(v, []byte(method))
	dp, dn := g.put(v, EncodePairs(md))
	bp, bn := g.put(v, msg)
	tok, _ := g.put(v, make([]byte, 4))
	st := g.invoke(v, "t_call", sp, sn, np, nn, mp, mn, dp, dn, bp, bn, uint64(timeoutMS), tok)
	token, _ := v.mem.ReadUint32Le(uint32(tok))
	return st, token
}

func (g *grpcGuest) call(service []byte, method string, md [][2]string, msg []byte, timeoutMS uint32) (st Status, token uint32) {
	g.onLoop(func(v *vm) { st, token = g.startCall(v, service, method, md, msg, timeoutMS) })
	return
}

func (g *grpcGuest) stream(service []byte, method string, md [][2]string) (st Status, token uint32) {
	g.onLoop(func(v *vm) {
		sp, sn := g.put(v, service)
		np, nn := g.put(v, []byte("t.S"))
		mp, mn := g.put(v, []byte(method))
		dp, dn := g.put(v, EncodePairs(md))
		tok, _ := g.put(v, make([]byte, 4))
		st = g.invoke(v, "t_stream", sp, sn, np, nn, mp, mn, dp, dn, tok)
		token, _ = v.mem.ReadUint32Le(uint32(tok))
	})
	return
}

func (g *grpcGuest) send(token uint32, msg string, end bool) (st Status) {
	g.onLoop(func(v *vm) {
		p, n := g.put(v, []byte(msg))
		st = g.invoke(v, "t_send", uint64(token), p, n, uint64(b2u(end)))
	})
	return
}

func (g *grpcGuest) hostcall(name string, token uint32) (st Status) {
	g.onLoop(func(v *vm) { st = g.invoke(v, name, uint64(token)) })
	return
}

// next is the guest's next gRPC callback. The wait is a guard against a
// hang, not a synchronisation: every expected event is on its way.
func (g *grpcGuest) next() grpcEvent {
	g.t.Helper()
	select {
	case e := <-g.events:
		return e
	case <-time.After(20 * time.Second):
		g.t.Fatal("no gRPC callback")
	}
	return grpcEvent{}
}

// expect reads len(want) callbacks and compares them, in order.
func (g *grpcGuest) expect(want ...string) {
	g.t.Helper()
	var got []string
	for range want {
		got = append(got, g.next().String())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		g.t.Errorf("callbacks:\n got %v\nwant %v", got, want)
	}
}

// expectEnded reads the status callback of call or stream tok, which must
// carry code, and then its close with code; it returns the status.
func (g *grpcGuest) expectEnded(tok uint32, code codes.Code, what string) grpcEvent {
	g.t.Helper()
	e := g.next()
	if e.tag != 'S' || e.token != tok || e.arg != uint32(code) {
		g.t.Errorf("%s status: %v", what, e)
	}
	g.expect(fmt.Sprintf(`C%d(%d "")`, tok, code))
	return e
}

// drainWake empties the loop's wake-up signal, so that the next one is
// a post made after this point; loop only.
func (g *grpcGuest) drainWake() {
	select {
	case <-g.p.workers[0].loop.wake:
	default:
	}
}

// endQueued makes hostcall (t_cancel or t_close) end the callout token,
// and holds the loop until the callout's goroutine has posted what the
// reset made it report, so that quiet afterwards proves it was dropped.
func (g *grpcGuest) endQueued(hostcall string, token uint32) {
	g.t.Helper()
	g.onLoop(func(v *vm) {
		g.drainWake()
		if st := g.invoke(v, hostcall, uint64(token)); st != StatusOK {
			g.t.Errorf("%s: %v", hostcall, st)
			return
		}
		<-g.p.workers[0].loop.wake
	})
}

// quiet checks the guest got no callback up to now: a no-op task posted
// to the loop after every callout goroutine has ended runs after anything
// they posted.
func (g *grpcGuest) quiet() {
	g.t.Helper()
	g.onLoop(func(*vm) {})
	select {
	case e := <-g.events:
		g.t.Errorf("unexpected callback %v", e)
	default:
	}
}

// grpcService is a serialized envoy.config.core.v3.GrpcService naming
// cluster through envoy_grpc, with initial_metadata md.
func grpcService(cluster string, md ...[2]string) []byte {
	var eg []byte
	eg = protowire.AppendTag(eg, 1, protowire.BytesType)
	eg = protowire.AppendString(eg, cluster)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, eg)
	for _, kv := range md {
		var hv []byte
		hv = protowire.AppendTag(hv, 1, protowire.BytesType)
		hv = protowire.AppendString(hv, kv[0])
		hv = protowire.AppendTag(hv, 2, protowire.BytesType)
		hv = protowire.AppendString(hv, kv[1])
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, hv)
	}
	return b
}

// TestGrpcCall: a unary call reaches the server over HTTP/2 with the
// plugin's metadata (and the GrpcService's), and its reply reaches
// proxy_on_grpc_receive alone, as Envoy's GrpcCallClientHandler delivers
// onSuccess; tokens are Envoy's call ids (5, 9, ...).
func TestGrpcCall(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})

	st, tok := g.call([]byte("grpc"), "Echo", [][2]string{{"X-In", "a"}}, []byte("hi"), 5000)
	if st != StatusOK || tok != 5 {
		t.Fatalf("proxy_grpc_call by cluster name: %v token %d", st, tok)
	}
	g.expect(`M5(9 "echo:hi|a")`)
	st, tok = g.call(grpcService("grpc", [2]string{"x-in", "svc"}), "Echo", [][2]string{{"x-in", "b"}}, nil, 0)
	if st != StatusOK || tok != 9 {
		t.Fatalf("proxy_grpc_call by GrpcService: %v token %d", st, tok)
	}
	g.expect(`M9(11 "echo:|svc,b")`)
	g.quiet()
	// A finished call is forgotten.
	if st := g.hostcall("t_cancel", 5); st != StatusNotFound {
		t.Errorf("cancel of a finished call: %v", st)
	}
}

// TestGrpcCallStatuses: every non-OK status the server returns reaches
// proxy_on_grpc_close with its code, and proxy_get_status gives code and
// message there.
func TestGrpcCallStatuses(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	for code := 1; code <= 16; code++ {
		st, tok := g.call([]byte("grpc"), "Fail", nil, []byte(fmt.Sprint(code)), 5000)
		if st != StatusOK {
			t.Fatalf("code %d: %v", code, st)
		}
		g.expect(fmt.Sprintf(`S%d(%d "failed with %d")`, tok, code, code), fmt.Sprintf(`C%d(%d "")`, tok, code))
	}
	// An unknown method is the server's UNIMPLEMENTED.
	_, tok := g.call([]byte("grpc"), "Nope", nil, nil, 5000)
	g.expect(fmt.Sprintf(`S%d(12 "/t.S/Nope")`, tok), fmt.Sprintf(`C%d(12 "")`, tok))
	g.quiet()
}

// TestGrpcCallTimeout: a call to a server that never answers ends with
// DEADLINE_EXCEEDED (4) when its timeout passes.
func TestGrpcCallTimeout(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	_, tok := g.call([]byte("grpc"), "Hang", nil, nil, 20)
	if e := g.expectEnded(tok, codes.DeadlineExceeded, "call"); e.data == "" {
		t.Errorf("status without a message: %v", e)
	}
	// Whether the server saw the call before its deadline passed depends
	// on the machine, so its side is not asserted here (TestGrpcCancel
	// checks that an abandoned call reaches the server as a reset).
	g.quiet()
}

// TestGrpcCancel: proxy_grpc_cancel resets the call on the server and the
// plugin hears nothing more of it, also when its reply is already waiting
// on the worker's loop.
func TestGrpcCancel(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	// A hanging call: the server sees the reset; the client's own
	// CANCELLED close, posted once the reset is done, is dropped.
	_, tok := g.call([]byte("grpc"), "Hang", nil, nil, 0)
	<-srv.entered
	g.endQueued("t_cancel", tok)
	if err := <-srv.gone; !errors.Is(err, context.Canceled) {
		t.Errorf("server saw %v, want the call cancelled", err)
	}
	g.quiet()
	if st := g.hostcall("t_cancel", tok); st != StatusNotFound {
		t.Errorf("second cancel: %v", st)
	}

	// A reply already queued on the loop when the plugin cancels.
	l := g.p.workers[0].loop
	g.onLoop(func(v *vm) {
		g.drainWake()
		st, tok := g.startCall(v, []byte("grpc"), "Echo", nil, []byte("x"), 5000)
		if st != StatusOK {
			t.Errorf("call: %v", st)
			return
		}
		<-l.wake // the reply is queued behind this task
		if st := g.invoke(v, "t_cancel", uint64(tok)); st != StatusOK {
			t.Errorf("cancel: %v", st)
		}
	})
	g.quiet()

	// proxy_grpc_close of a call cancels it too (Context::grpcClose).
	_, tok = g.call([]byte("grpc"), "Hang", nil, nil, 0)
	<-srv.entered
	<-srv.entered // the Echo above
	g.endQueued("t_close", tok)
	if err := <-srv.gone; !errors.Is(err, context.Canceled) {
		t.Errorf("server saw %v, want the call cancelled", err)
	}
	g.quiet()
}

// TestGrpcStream: initial metadata, each reply, trailing metadata and the
// close arrive in order; send with end_stream half-closes; the stream
// stays known after the server closed it until the plugin closes it.
func TestGrpcStream(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	st, tok := g.stream(grpcService("grpc"), "Chat", [][2]string{{"x-in", "s"}})
	if st != StatusOK || tok != 6 {
		t.Fatalf("proxy_grpc_stream: %v token %d", st, tok)
	}
	if st := g.send(tok, "a", false); st != StatusOK {
		t.Fatalf("send: %v", st)
	}
	g.expect(`I6(2 "x-chat=hi")`, `M6(4 "re:a")`)
	if st := g.send(tok, "", true); st != StatusOK {
		t.Fatalf("send with end_stream: %v", st)
	}
	g.expect(`M6(3 "re:")`, `T6(1 "x-trail=bye")`, `S6(0 "")`, `C6(0 "")`)
	g.quiet()
	if st := g.hostcall("t_close", tok); st != StatusOK {
		t.Errorf("close after the server's close: %v", st)
	}
	if st := g.hostcall("t_close", tok); st != StatusNotFound {
		t.Errorf("second close: %v", st)
	}
	if st := g.send(tok, "late", false); st != StatusNotFound {
		t.Errorf("send on a closed stream: %v", st)
	}
	if st := g.send(5, "x", false); st != StatusBadArgument {
		t.Errorf("send on a call token: %v", st)
	}
}

// TestGrpcStreamClose: proxy_grpc_close half-closes a stream; the server's
// replies and close still reach the plugin, and then it is forgotten.
func TestGrpcStreamClose(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	_, tok := g.stream([]byte("grpc"), "Chat", nil)
	g.send(tok, "q", false)
	g.expect(fmt.Sprintf(`I%d(2 "x-chat=hi")`, tok), fmt.Sprintf(`M%d(4 "re:q")`, tok))
	if st := g.hostcall("t_close", tok); st != StatusOK {
		t.Fatalf("close: %v", st)
	}
	g.expect(fmt.Sprintf(`T%d(1 "x-trail=bye")`, tok), fmt.Sprintf(`S%d(0 "")`, tok), fmt.Sprintf(`C%d(0 "")`, tok))
	if st := g.hostcall("t_close", tok); st != StatusNotFound {
		t.Errorf("close after both ends closed: %v", st)
	}
}

// TestGrpcStreamCancel: cancelling a live stream resets it on the server,
// and nothing more reaches the plugin.
func TestGrpcStreamCancel(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	_, tok := g.stream([]byte("grpc"), "Chat", nil)
	g.expect(fmt.Sprintf(`I%d(2 "x-chat=hi")`, tok))
	g.endQueued("t_cancel", tok)
	if err := <-srv.gone; !errors.Is(err, context.Canceled) {
		t.Errorf("server saw %v, want the stream cancelled", err)
	}
	g.quiet()
	if st := g.send(tok, "x", false); st != StatusNotFound {
		t.Errorf("send after cancel: %v", st)
	}
}

// TestGrpcReset: a connection the server drops before answering ends the
// call and the stream with UNAVAILABLE (14), as Envoy reports a reset
// before the response headers (the router's local reply, which the gRPC
// client maps to its grpc-status).
func TestGrpcReset(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	_, tok := g.call([]byte("grpc"), "Reset", nil, []byte("x"), 5000)
	g.expectEnded(tok, codes.Unavailable, "call")

	// The stream sees what Envoy's async client makes of the router's
	// local reply to a reset before headers: empty initial metadata, the
	// trailers, then the close.
	_, tok = g.stream([]byte("grpc"), "Reset", nil)
	g.send(tok, "x", false)
	g.expect(fmt.Sprintf(`I%d(0 "")`, tok), fmt.Sprintf(`T%d(0 "")`, tok))
	g.expectEnded(tok, codes.Unavailable, "stream")
	g.quiet()
}

// TestGrpcCallArguments: the hostcalls' answers to bad arguments, as
// Envoy's Context::grpcCall and grpcStream give them.
func TestGrpcCallArguments(t *testing.T) {
	srv := startGrpcServer(t)
	g := newGrpcGuest(t, grpcCallers{srv.addr})
	if st, _ := g.call([]byte("nosuch"), "Echo", nil, nil, 0); st != StatusParseFailure {
		t.Errorf("unknown cluster name: %v", st)
	}
	if st, _ := g.call(grpcService("nosuch"), "Echo", nil, nil, 0); st != StatusBadArgument {
		t.Errorf("GrpcService naming an unknown cluster: %v", st)
	}
	if st, _ := g.stream([]byte("nosuch"), "Chat", nil); st != StatusParseFailure {
		t.Errorf("stream to an unknown cluster: %v", st)
	}
	g.onLoop(func(v *vm) {
		sp, sn := g.put(v, []byte("grpc"))
		bad, bn := g.put(v, []byte{9, 0, 0, 0})
		if st := g.invoke(v, "t_call", sp, sn, sp, sn, sp, sn, bad, bn, 0, 0, 0, uint64(grpcTestArea)); st != StatusBadArgument {
			t.Errorf("malformed metadata: %v", st)
		}
		if st := g.invoke(v, "t_call", 1<<30, 4, sp, sn, sp, sn, 0, 0, 0, 0, 0, uint64(grpcTestArea)); st != StatusInvalidMemoryAccess {
			t.Errorf("service out of memory: %v", st)
		}
	})
	for _, name := range []string{"t_cancel", "t_close"} {
		if st := g.hostcall(name, 5); st != StatusNotFound {
			t.Errorf("%s of an unknown token: %v", name, st)
		}
	}
	g.quiet()

	// Without clusters that take gRPC, every cluster is unknown.
	h := newGrpcGuest(t, &testCaller{clusters: map[string]string{"grpc": "http://127.0.0.1:1"}})
	if st, _ := h.call([]byte("grpc"), "Echo", nil, nil, 0); st != StatusParseFailure {
		t.Errorf("cluster without gRPC: %v", st)
	}
}

func FuzzParseGrpcService(f *testing.F) {
	f.Add(grpcService("grpc"))
	f.Add(grpcService("c", [2]string{"k", "v"}))
	f.Add([]byte("outbound|443||limits.svc"))
	f.Add([]byte{0x0a, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		cluster, md, isProto := parseGrpcService(b)
		if !isProto && (cluster != "" || md != nil) {
			t.Fatalf("not a message, yet cluster %q metadata %v", cluster, md)
		}
		if isProto && cluster != "" {
			// What parses re-encodes to a message naming the same cluster.
			again, _, ok := parseGrpcService(grpcService(cluster, md...))
			if !ok || again != cluster {
				t.Fatalf("cluster %q does not survive re-encoding (%q)", cluster, again)
			}
		}
	})
}
