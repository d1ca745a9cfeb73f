package host

import (
	"context"
	"errors"
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
func serveStreamed(t *testing.T, probe string, body chanBody) (*Plugin, *Response) {
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

// next reads the next chunk the client gets.
func next(t *testing.T, resp *Response) string {
	t.Helper()
	b, err := resp.BodyStream.Next(context.Background())
	if err != nil {
		t.Fatalf("body: %v", err)
	}
	return string(b)
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
	go func() { body <- chunk{b: []byte("first")} }()
	if got := next(t, resp); got != "first" {
		t.Fatalf("first chunk %q", got)
	}
	// Only now does the upstream send the rest.
	go func() {
		body <- chunk{b: []byte("second")}
		body <- chunk{err: io.EOF}
	}()
	if got := next(t, resp); got != "second" {
		t.Fatalf("second chunk %q", got)
	}
	if got := next(t, resp); got != "|5/false;6/false;0/true;" {
		t.Fatalf("the filter saw %q", got)
	}
	wantEOF(t, resp)
}

// As Envoy: StopIterationAndBuffer keeps the chunks in the host, which
// calls the filter again with everything buffered so far, and forwards it
// all when a callback continues.
func TestStreamedBodyBufferedWhenTheFilterAsks(t *testing.T) {
	body := make(chanBody)
	_, resp := serveStreamed(t, "buffer-body", body)
	go func() {
		body <- chunk{b: []byte("ab")}
		body <- chunk{b: []byte("cd")}
		body <- chunk{b: []byte("ef"), err: io.EOF}
	}()
	if got := next(t, resp); got != "abcdef|2/false;4/false;6/true;" {
		t.Fatalf("client got %q", got)
	}
	wantEOF(t, resp)
}

// An upstream reset in the middle of the body resets the client's stream,
// and the stream still ends in the VM.
func TestStreamedBodyUpstreamResetEndsTheStream(t *testing.T) {
	body := make(chanBody)
	p, resp := serveStreamed(t, "stream-body", body)
	reset := errors.New("connection reset")
	go func() {
		body <- chunk{b: []byte("part")}
		body <- chunk{err: reset}
	}()
	if got := next(t, resp); got != "part" {
		t.Fatalf("first chunk %q", got)
	}
	if _, err := resp.BodyStream.Next(context.Background()); !errors.Is(err, reset) {
		t.Fatalf("after the reset: %v", err)
	}
	if n := p.ParkedStreams(0); n != 0 {
		t.Fatalf("%d streams left parked", n)
	}
}
