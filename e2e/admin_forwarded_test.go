package e2e_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/e2e/envoy"
)

// fromAddr is a client whose connections come from ip (a loopback
// address of its own), as a caller on another host would.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// adminDo sends one admin call with the token and, unless empty, an
// X-Forwarded-For; it returns the status and body.
func adminDo(t *testing.T, c *http.Client, method, url, token, xff string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The admin route under X-Forwarded-For, in both modes of the connection
// manager. Without use_remote_address (Envoy's default) Envoy takes
// source.address from the last X-Forwarded-For entry, so an allowed
// address in that header must not open the route: the filter refuses
// every address that may have come from a header (port 0), and an
// operator's call without the header still passes. With
// use_remote_address Envoy ignores the header for source.address.
func TestAdminRouteUnderForwardedFor(t *testing.T) {
	const token = "e2e-admin-token"
	sum := sha256.Sum256([]byte(token))
	cfg := `{"limits":[{"name":"per-key","key":["header:x-key"],"limit":3,"window":"1h"}],
	  "admin":{"client_cidrs":["10.20.0.0/16","127.0.0.4/32"],"token_sha256":"` + hex.EncodeToString(sum[:]) + `"}}`
	for _, useRemote := range []bool{false, true} {
		name := "without use_remote_address"
		if useRemote {
			name = "with use_remote_address"
		}
		t.Run(name, func(t *testing.T) {
			insts := startInstances(t, 1, func(wasm, backendAddr string) string {
				b := pluginBootstrap(wasm, cfg, backendAddr, nil)
				b.Listener.UseRemoteAddress = useRemote
				return b.YAML()
			}, envoy.Options{})
			in := insts[0]
			port := in.base[strings.LastIndexByte(in.base, ':'):]
			// Each caller dials the listener on 127.0.0.1 from its own
			// loopback address.
			base := "http://127.0.0.1" + port
			key := uniqueKey("tenant")
			for i := range 3 {
				if st, _ := hit(t, base+"/", key); st != 200 {
					t.Fatalf("request %d: %d", i+1, st)
				}
			}
			q := "/.sluice/quota?limit=per-key&key=" + key
			outsider, operator := fromAddr("127.0.0.3"), fromAddr("127.0.0.4")

			// An outsider naming an allowed address in X-Forwarded-For.
			for _, method := range []string{"GET", "POST"} {
				path := q
				if method == "POST" {
					path = "/.sluice/quota/reset?limit=per-key&key=" + key
				}
				if st, body := adminDo(t, outsider, method, base+path, token, "10.20.1.5"); st != 404 || body != "" {
					t.Fatalf("%s from 127.0.0.3 as 10.20.1.5: %d %q, want the empty 404", method, st, body)
				}
			}
			if st, _ := hit(t, base+"/", key); st != 429 {
				t.Fatalf("after the spoofed reset: %d, want still 429", st)
			}

			// The operator from an allowed connection, without the header.
			st, body := adminDo(t, operator, "GET", base+q, token, "")
			if st != 200 || !strings.Contains(body, `"remaining":0`) {
				t.Fatalf("operator's get: %d %q", st, body)
			}
			// The same call with an X-Forwarded-For: without
			// use_remote_address the address is the header's, refused
			// even when it names the operator's own address.
			st, body = adminDo(t, operator, "GET", base+q, token, "127.0.0.4")
			if useRemote {
				if st != 200 {
					t.Fatalf("operator's get with X-Forwarded-For: %d %q, want 200", st, body)
				}
			} else if st != 404 || body != "" {
				t.Fatalf("operator's get with X-Forwarded-For: %d %q, want the empty 404", st, body)
			}
			// The rule is the address's, not the header's: a last entry
			// Envoy cannot parse as a bare IP address leaves
			// source.address the connection's own (with its port), which
			// passes from an allowed connection and fails from another.
			unparsable := []string{"garbage", "127.0.0.1:5555", "[::1]", "10.20.1.5,", "10.20.1.5, "}
			for _, xff := range unparsable {
				if st, body := adminDo(t, operator, "GET", base+q, token, xff); st != 200 {
					t.Fatalf("operator's get with X-Forwarded-For %q: %d %q, want 200", xff, st, body)
				}
				if st, body := adminDo(t, outsider, "GET", base+q, token, xff); st != 404 || body != "" {
					t.Fatalf("outsider's get with X-Forwarded-For %q: %d %q, want the empty 404", xff, st, body)
				}
			}
			wantDenied := uint64(3 + len(unparsable))
			if useRemote {
				wantDenied = uint64(2 + len(unparsable))
			}
			if n := in.metric("sluice.admin.denied"); n != wantDenied {
				t.Fatalf("sluice.admin.denied = %d, want %d", n, wantDenied)
			}
		})
	}
}

// rawRequest sends one HTTP/1.1 request exactly as written (paths no
// client library would send) from ip, and returns the whole response.
func rawRequest(t *testing.T, ip, addr, req string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(c)
	return string(out)
}

// The spellings of the issue, sent over a real connection to the stand-in:
// a request carrying the admin token is answered by the filter, from an
// allowed address or not, and the echo backend (which would reflect the
// token back) never sees it.
func TestAdminTokenNeverReachesTheUpstream(t *testing.T) {
	const token = "e2e-admin-token"
	sum := sha256.Sum256([]byte(token))
	cfg := `{"limits":[{"name":"per-key","key":["header:x-key"],"limit":3,"window":"1h"}],
	  "admin":{"client_cidrs":["127.0.0.4/32"],"token_sha256":"` + hex.EncodeToString(sum[:]) + `"}}`
	insts := startInstances(t, 1, func(wasm, backendAddr string) string {
		b := pluginBootstrap(wasm, cfg, backendAddr, nil)
		b.Listener.UseRemoteAddress = true
		return b.YAML()
	}, envoy.Options{})
	addr := strings.TrimPrefix(insts[0].base, "http://")
	bearer := "Authorization: Bearer " + token + "\r\n"
	// A request with more than one credential is refused before any is
	// compared (RFC 6750 section 2: one token, in one place), so it tells
	// a guesser nothing; the others are answered as the admin route's 404.
	for _, tc := range []struct {
		target, auth string
		want         string
	}{
		{"/.sluice;v=1/quota", bearer, "404"},
		{"/.sluice%00/quota", bearer, "404"},
		{"/%c0%aesluice/quota", bearer, "404"},
		{"/.sluice./quota", bearer, "404"},
		{"/%EF%BC%8Esluice/quota", bearer, "404"},
		{"/\xef\xbc\x8esluice/quota", bearer, "404"},
		{"/%252esluice/quota", bearer, "404"},
		{"/?/.sluice/quota", bearer, "404"},
		{"/api", "Authorization: Basic eDp5\r\n" + bearer, "400"},
		{"/api", "Authorization: Bearer:" + token + "\r\n", "404"},
		{"/api?access_token=" + token, "", "404"},
	} {
		for _, ip := range []string{"127.0.0.4", "127.0.0.3"} {
			resp := rawRequest(t, ip, addr, "GET "+tc.target+" HTTP/1.1\r\nHost: x\r\n"+tc.auth+"Connection: close\r\n\r\n")
			if !strings.HasPrefix(resp, "HTTP/1.1 "+tc.want) || strings.Contains(resp, token) || strings.Contains(resp, `"name":"backend"`) {
				t.Errorf("%q %q from %s: %q, want the filter's %s and no echo of the token", tc.target, tc.auth, ip, resp, tc.want)
			}
		}
	}
}
