package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// chunk is one read of a streamed upstream body.
type chunk struct {
	b   []byte
	err error
}

// chanBody is an upstream body whose chunks the test sends one at a time:
// a send completes only when the host has taken the chunk.
type chanBody chan chunk

func (c chanBody) Next(ctx context.Context) ([]byte, error) {
	select {
	case ch := <-c:
		return ch.b, ch.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// serveStreamed runs a probe stream whose upstream answers with body.
func serveStreamed(t *testing.T, probe string, body BodyStream) (*Plugin, *Response) {
	t.Helper()
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	up := func(context.Context, *Request) (*Response, error) {
		return &Response{Status: 200, Headers: [][2]string{{"content-type", "text/event-stream"}}, BodyStream: body}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	resp, err := p.Serve(ctx, probeReq(0, probe), up)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || resp.BodyStream == nil || hv(resp.Headers, "x-resp-seen") != probe {
		t.Fatalf("headers: %+v", resp)
	}
	return p, resp
}

// sendAll has the upstream send chunks, in order, in the background.
func sendAll(body chanBody, chunks ...chunk) {
	go func() {
		for _, c := range chunks {
			body <- c
		}
	}()
}

// wantNext checks the next chunk the client gets.
func wantNext(t *testing.T, what string, resp *Response, want string) {
	t.Helper()
	b, err := resp.BodyStream.Next(context.Background())
	if err != nil || string(b) != want {
		t.Fatalf("%s: %q %v, want %q", what, b, err, want)
	}
}

func wantEOF(t *testing.T, resp *Response) {
	t.Helper()
	if b, err := resp.BodyStream.Next(context.Background()); !errors.Is(err, io.EOF) || len(b) > 0 {
		t.Fatalf("after the end: %q %v, want EOF", b, err)
	}
}

// As Envoy: a body callback that returns Continue lets its chunk through
// at once, so the client holds the first chunk before the upstream sends
// the next; end_of_stream comes with an empty last callback when the
// upstream's end has no data of its own.
func TestStreamedBodyChunksPassAsTheyCome(t *testing.T) {
	body := make(chanBody)
	_, resp := serveStreamed(t, "stream-body", body)
	sendAll(body, chunk{b: []byte("first")})
	wantNext(t, "first chunk", resp, "first")
	// Only now does the upstream send the rest.
	sendAll(body, chunk{b: []byte("second")}, chunk{err: io.EOF})
	wantNext(t, "second chunk", resp, "second")
	wantNext(t, "what the filter saw", resp, "|5/false;6/false;0/true;")
	wantEOF(t, resp)
}

// As Envoy: StopIterationAndBuffer keeps the chunks in the host, which
// calls the filter again with everything buffered so far, and forwards it
// all when a callback continues.
func TestStreamedBodyBufferedWhenTheFilterAsks(t *testing.T) {
	body := make(chanBody)
	_, resp := serveStreamed(t, "buffer-body", body)
	sendAll(body, chunk{b: []byte("ab")}, chunk{b: []byte("cd")}, chunk{b: []byte("ef"), err: io.EOF})
	wantNext(t, "the whole body", resp, "abcdef|2/false;4/false;6/true;")
	wantEOF(t, resp)
}

// An upstream reset in the middle of the body resets the client's stream,
// and the stream still ends in the VM.
func TestStreamedBodyUpstreamResetEndsTheStream(t *testing.T) {
	body := make(chanBody)
	p, resp := serveStreamed(t, "stream-body", body)
	reset := errors.New("connection reset")
	sendAll(body, chunk{b: []byte("part")}, chunk{err: reset})
	wantNext(t, "first chunk", resp, "part")
	if _, err := resp.BodyStream.Next(context.Background()); !errors.Is(err, reset) {
		t.Fatalf("after the reset: %v", err)
	}
	if n := p.ParkedStreams(0); n != 0 {
		t.Fatalf("%d streams left parked", n)
	}
}

// closingBody is a chanBody that records being closed.
type closingBody struct {
	chanBody
	closed chan struct{}
}

func (c closingBody) Close() error { close(c.closed); return nil }

// A local reply to a streamed response ends the stream before its body:
// the upstream's body is closed, as Envoy resets the upstream request.
func TestStreamedBodyClosedWhenTheStreamEndsFirst(t *testing.T) {
	r, _ := newRT(t, "")
	p := probePlugin(t, r, PluginConfig{Configuration: []byte("x")})
	body := closingBody{make(chanBody), make(chan struct{})}
	up := func(context.Context, *Request) (*Response, error) {
		return &Response{Status: 200, BodyStream: body}, nil
	}
	resp, err := p.Serve(context.Background(), probeReq(0, "local-resp"), up)
	if err != nil || resp.Status != 502 || resp.BodyStream != nil {
		t.Fatalf("%v %+v, want the local 502", err, resp)
	}
	select {
	case <-body.closed:
	default:
		t.Fatal("the upstream body was left open")
	}
}

// trailingBody is a chanBody followed by trailers, as a chunked HTTP/1.1
// or an HTTP/2 body can be.
type trailingBody struct {
	chanBody
	trailers [][2]string
}

func (b trailingBody) Trailers() [][2]string { return b.trailers }

// wantTrailers checks the trailers the client gets after the body.
func wantTrailers(t *testing.T, resp *Response, want [][2]string) {
	t.Helper()
	tb, ok := resp.BodyStream.(TrailingBody)
	if !ok {
		t.Fatalf("the client's body %T has no trailers", resp.BodyStream)
	}
	if got := tb.Trailers(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("trailers %q, want %q", got, want)
	}
}

// As Envoy: when trailers follow the body, the last body callback says
// end_of_stream false (and an end without data of its own gets no body
// callback), proxy_on_response_trailers gets the trailers, and the client
// gets them after the body, with what the filter added.
func TestStreamedBodyTrailersReachTheFilterAndTheClient(t *testing.T) {
	upstream := [][2]string{{"Grpc-Status", "0"}, {"x-usage", "7"}}
	t.Run("passed as they come", func(t *testing.T) {
		body := trailingBody{make(chanBody), upstream}
		_, resp := serveStreamed(t, "stream-body", body)
		sendAll(body.chanBody, chunk{b: []byte("first")}, chunk{b: []byte("second")}, chunk{err: io.EOF})
		wantNext(t, "first chunk", resp, "first")
		wantNext(t, "second chunk", resp, "second")
		wantEOF(t, resp)
		wantTrailers(t, resp, [][2]string{{"grpc-status", "0"}, {"x-usage", "7"},
			{"x-probe-trailers", "2:ok grpc-status=0 x-usage=7 |5/false;6/false;"}})
	})
	t.Run("buffered", func(t *testing.T) {
		body := trailingBody{make(chanBody), upstream}
		_, resp := serveStreamed(t, "buffer-body", body)
		sendAll(body.chanBody, chunk{b: []byte("ab")}, chunk{b: []byte("cd"), err: io.EOF})
		// The filter held the body to its end: it goes on with the
		// trailers.
		wantNext(t, "the whole body", resp, "abcd")
		wantEOF(t, resp)
		wantTrailers(t, resp, [][2]string{{"grpc-status", "0"}, {"x-usage", "7"},
			{"x-probe-trailers", "2:ok grpc-status=0 x-usage=7 |2/false;4/false;"}})
	})
	t.Run("none", func(t *testing.T) {
		body := trailingBody{chanBody: make(chanBody)}
		_, resp := serveStreamed(t, "stream-body", body)
		sendAll(body.chanBody, chunk{b: []byte("all"), err: io.EOF})
		wantNext(t, "the body and what the filter saw", resp, "all|3/true;")
		wantEOF(t, resp)
		wantTrailers(t, resp, nil)
	})
}
