package engine

import "testing"

// TestExternalAnswerBurstIsCapacity: a tenant answered burst N can send N
// requests at once, whether N is above or below its rate (static limits
// add burst to the rate; answers do not).
func TestExternalAnswerBurstIsCapacity(t *testing.T) {
	quotas := map[string]string{
		"above": `{"average":2,"period":"1h","burst":5,"tenant_key":"above"}`,
		"below": `{"average":5,"period":"1h","burst":2,"tenant_key":"below"}`,
		"none":  `{"average":3,"period":"1h","tenant_key":"none"}`,
	}
	d, _ := newExtHarness(t, extConfig(""), quotas)
	for tenant, want := range map[string]int{"above": 5, "below": 2, "none": 3} {
		if got := admitted(t, d, tenant, 8); got != want {
			t.Errorf("%s admitted %d of 8, want the bucket's capacity %d", tenant, got, want)
		}
	}
}

// TestExternalRefusalNamesTheAnsweredRate: the access log's rule of a
// refusal by the external limit is the rate the service answered for the
// tenant, not the fallback's.
func TestExternalRefusalNamesTheAnsweredRate(t *testing.T) {
	d, _ := newExtHarness(t, extConfig(""), map[string]string{"acme": `{"average":1,"period":"1m","tenant_key":"acme"}`})
	if o := d.doHeaders(tenantHeaders("acme")); o.status != 200 {
		t.Fatalf("first: %d", o.status)
	}
	d.f.Stream.FilterState = nil
	if o := d.doHeaders(tenantHeaders("acme")); o.status != 429 {
		t.Fatalf("second: %d", o.status)
	}
	if got, want := d.f.Stream.FilterState[stateRule], "token_bucket 1/1m0s"; got != want {
		t.Fatalf("rule %q, want the answer's %q (filter state %v)", got, want, d.f.Stream.FilterState)
	}
}
