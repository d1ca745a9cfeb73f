package engine

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/filter/host/hosttest"
)

// TestExternalFailureCode: with Redis down, an answer's failure_code is
// the status of its tenant's deny rejections; a tenant whose answer has
// none gets the backend's failure_status.
func TestExternalFailureCode(t *testing.T) {
	cfg := strings.Replace(extConfig(`,"mode":"global"`), `{"external"`,
		`{"backend":{"cluster":"redis","timeout":"50ms","retries":0,"failure_status":503},"external"`, 1)
	quotas := map[string]string{
		"acme":  `{"limit":4,"window":"1h","tenant_key":"acme","failure_policy":"failclosed","failure_code":451}`,
		"hooli": `{"limit":4,"window":"1h","tenant_key":"hooli","failure_policy":"deny"}`,
	}
	d, _ := newExtHarness(t, cfg, quotas)
	d.reply = func(*hosttest.Call) (int, []byte, bool) { return 503, nil, true } // Redis is down
	if o := d.doHeaders(tenantHeaders("acme")); o.status != 451 {
		t.Fatalf("acme: %d, want its answer's failure_code 451", o.status)
	}
	if o := d.doHeaders(tenantHeaders("hooli")); o.status != 503 {
		t.Fatalf("hooli: %d, want the backend's failure_status 503", o.status)
	}
	// The code is kept with the cached answer: the second request of acme
	// is a cache hit and still gets it.
	if o := d.doHeaders(tenantHeaders("acme")); o.status != 451 {
		t.Fatalf("acme from the cache: %d, want 451", o.status)
	}
}
