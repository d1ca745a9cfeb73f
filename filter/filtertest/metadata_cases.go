package filtertest

import "testing"

func init() { Cases = append(Cases, metadataCases...) }

const jwtNS = "envoy.filters.http.jwt_authn"

// withMetadata gives r dynamic metadata.
func withMetadata(r Request, md ...Metadata) Request { r.Metadata = md; return r }

func sub(v any) Metadata { return Metadata{Namespace: jwtNS, Path: "jwt_payload.sub", Value: v} }

var metadataCases = []Case{
	{
		Name: "metadata key: one bucket per claim, numbers in decimal, absent is missing",
		Config: `{"limits":[{"name":"user","key":["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"],
			"requests_per_second":1,"burst":0,"on_missing_key":"deny"}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			expect(t, h, []step{
				{"first alice", withMetadata(get("/"), sub("alice")), true},
				{"second alice", withMetadata(get("/"), sub("alice")), false},
				{"bob has his own bucket", withMetadata(get("/"), sub("bob")), true},
				{"no metadata is a missing key", get("/"), false},
				{"another namespace is missing", withMetadata(get("/"), Metadata{Namespace: "other", Path: "jwt_payload.sub", Value: "carol"}), false},
				{"number 42", withMetadata(get("/"), sub(42.0)), true},
				{"the string 42 is the same key", withMetadata(get("/"), sub("42")), false},
				{"number 0.5", withMetadata(get("/"), sub(0.5)), true},
				{"eight-byte text stays a string", withMetadata(get("/"), sub("user-123")), true},
			})
			wantCounter(t, h, "sluice.limit.user.limited", 2)
		},
	},
	{
		Name: "metadata match: value and present",
		Config: `{"limits":[
			{"name":"free","match":{"metadata":[{"namespace":"plans","path":"tier","value":"free"}]},"requests_per_second":1,"burst":0},
			{"name":"anon","match":{"metadata":[{"namespace":"envoy.filters.http.jwt_authn","path":"jwt_payload.sub","present":false}]},
			 "requests_per_second":1,"burst":0}]}`,
		Workers: 1,
		Run: func(t *testing.T, h Harness) {
			free := Metadata{Namespace: "plans", Path: "tier", Value: "free"}
			pro := Metadata{Namespace: "plans", Path: "tier", Value: "pro"}
			expect(t, h, []step{
				{"free user", withMetadata(get("/"), free, sub("a")), true},
				{"free user again", withMetadata(get("/"), free, sub("a")), false},
				{"pro user", withMetadata(get("/"), pro, sub("a")), true},
				{"pro user again", withMetadata(get("/"), pro, sub("a")), true},
				{"anonymous", get("/"), true},
				{"anonymous again", get("/"), false},
				{"signed in, no plan", withMetadata(get("/"), sub(7.0)), true},
			})
			wantCounter(t, h, "sluice.limit.free.limited", 1)
			wantCounter(t, h, "sluice.limit.anon.limited", 1)
		},
	},
}
