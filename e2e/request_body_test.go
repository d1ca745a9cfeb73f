package e2e_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestRequestWithBodyWaitsForItsRemoteDecision sends requests with
// bodies through a global limit: while the filter waits for Redis, the
// body callback must keep the request paused. As in Envoy, a Continue
// from it would resume the stream and send every POST upstream whatever
// Redis decided.
func TestRequestWithBodyWaitsForItsRemoteDecision(t *testing.T) {
	be := startDistBackend(t, viaWebdis)
	cfg := `{"limits":[{"name":"once","key":["header:x-key"],"limit":1,"window":"1h","mode":"global","failure_policy":"deny"}],` +
		be.backendBlock(`"timeout":"500ms"`) + `}`
	in := startDistInstances(t, 1, cfg, be.addr)[0]
	key := uniqueKey("body")
	post := func() int {
		t.Helper()
		req, _ := http.NewRequest("POST", in.base+"/upload", strings.NewReader(`{"payload":"x"}`))
		req.Header.Set("x-key", key)
		resp, err := distClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := post(); st != 200 {
		t.Fatalf("first POST: %d", st)
	}
	if st := post(); st != 429 {
		t.Fatalf("second POST: %d, want 429: the body let it through before Redis refused it", st)
	}
}
