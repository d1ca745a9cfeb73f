package host

import (
	"context"
	"testing"
)

// TestGuestSmoke runs the real filter with its default configuration: it
// loads under the default profile and passes a request through.
func TestGuestSmoke(t *testing.T) {
	r, sink := newRT(t, ProfileEnvoy139)
	p, err := r.NewPlugin(context.Background(), PluginConfig{Name: "sluice", RootID: "sluice", VMID: "sluice", Code: guest(t, "sluice.wasm"), Configuration: []byte("{}"), Concurrency: 2})
	if err != nil {
		t.Fatalf("%v\nlogs: %q", err, sink.messages())
	}
	defer p.Close(context.Background())
	for w := 0; w < 2; w++ {
		resp, err := p.Serve(context.Background(), getReq(w, "/"), okUpstream(200, "hi"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || string(resp.Body) != "hi" || p.Traps() != 0 {
			t.Errorf("worker %d: %+v traps %d logs %q", w, resp, p.Traps(), sink.messages())
		}
	}
}
