// Command upstash-server serves the Upstash REST protocol over a Redis,
// for trying the filter's upstash backend without Upstash:
//
//	upstash-server -redis 127.0.0.1:6379 -addr 127.0.0.1:8079 -token T
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-proxy/sluice/internal/fixtures/upstash"
)

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	addr := flag.String("addr", "127.0.0.1:8079", "listen address")
	token := flag.String("token", "", "bearer token clients must send (required)")
	flag.Parse()
	if *token == "" {
		log.Fatal("upstash-server: -token is required")
	}
	client := redis.NewClient(&redis.Options{Addr: *redisAddr, Protocol: 2, MaxRetries: -1})
	srv := &http.Server{Addr: *addr, Handler: upstash.New(client, *token), ReadHeaderTimeout: 5 * time.Second}
	log.Printf("upstash-server: listening on %s, Redis %s", *addr, *redisAddr)
	log.Fatal(srv.ListenAndServe())
}
