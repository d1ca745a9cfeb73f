// Command external-limits-grpc is a limits service for Sluice's external
// limit over gRPC (examples/external-limits-grpc/envoy.yaml), built on
// filter/external/grpcserver: all a team writes is the function that
// answers a lookup. Here the plans are a map; a real service reads its
// database.
//
//	go run ./examples/external-limits-grpc -addr 127.0.0.1:8084
package main

import (
	"context"
	"flag"
	"log"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-proxy/sluice/filter/external/grpcserver"
)

// plans are quotas: average requests per period, in a bucket of burst.
var plans = map[string]grpcserver.Limits{
	"gold": {Average: 20, Burst: 30, Period: "1s"},
	"free": {Average: 1, Burst: 2, Period: "1s"},
}

// tenants on a plan other than free.
var tenants = map[string]string{"acme": "gold"}

// getLimits answers a lookup: the tenant's plan, in the tenant's own
// bucket, cached by the filter for a minute.
func getLimits(_ context.Context, r *grpcserver.Request) (*grpcserver.Limits, error) {
	tenant := r.Header("x-tenant-id")
	if tenant == "" {
		// A failed lookup: the filter applies its fallback.
		return nil, status.Error(codes.InvalidArgument, "no x-tenant-id")
	}
	plan, ok := tenants[tenant]
	if !ok {
		plan = "free"
	}
	l := plans[plan]
	l.TenantKey = tenant
	l.CacheMaxAgeSeconds = 60
	return &l, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8084", "address to serve gRPC on")
	flag.Parse()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("limits service on %s", lis.Addr())
	log.Fatal(grpcserver.New(grpcserver.Func(getLimits)).Serve(lis))
}
