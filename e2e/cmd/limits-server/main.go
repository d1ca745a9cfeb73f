// Command limits-server is the demo limits service for Sluice's external
// limit (examples/external-limits; `make run` starts it):
//
//	limits-server -addr 127.0.0.1:8082
//
// It answers POSTed lookups {"method", "path", "headers"} by the
// x-tenant-id header: acme gets 20/s with a burst of 10, initech 5/s with
// 2, any other tenant 1/s with 1; a lookup without a tenant gets a 404.
// umbrella (as acme) is routed to the "premium" cluster by backend_url,
// and mallory's answers name a backend the example does not allow.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/sluice-proxy/sluice/internal/fixtures/limits"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8082", "listen address")
	flag.Parse()
	srv := &http.Server{Addr: *addr, Handler: limits.Demo(), ReadHeaderTimeout: 5 * time.Second}
	log.Printf("limits-server: listening on %s", *addr)
	log.Fatal(srv.ListenAndServe())
}
