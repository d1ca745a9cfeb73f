// Package limits is a small limits service for Sluice's external limit,
// behind the limits-server command and run in-process by the end-to-end
// tests: it answers each lookup with the plan of the tenant the lookup's
// x-tenant-id names.
package limits

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// Plan is a quota, answered as the service protocol's limit, window and
// burst.
type Plan struct {
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
	Burst  int64  `json:"burst"`
	// FailurePolicy and MaxAgeSeconds are passed on when set.
	FailurePolicy string `json:"failure_policy,omitempty"`
	MaxAgeSeconds int    `json:"cache_max_age_seconds,omitempty"`
}

// Lookup is the request the filter sends.
type Lookup struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

// Answer is what the service replies.
type Answer struct {
	Plan
	TenantKey string `json:"tenant_key"`
}

// Service answers lookups. Tenants without a plan get DefaultPlan, or a
// 404 when it is empty (the filter then applies its fallback).
type Service struct {
	mu          sync.Mutex
	plans       map[string]Plan
	tenants     map[string]string
	defaultPlan string
	lookups     []Lookup
}

// New returns a service with plans by name and tenants mapped to plan
// names.
func New(plans map[string]Plan, tenants map[string]string, defaultPlan string) *Service {
	return &Service{plans: plans, tenants: tenants, defaultPlan: defaultPlan}
}

// Demo is the service `make run EXAMPLE=external-limits` talks to: acme on
// gold, initech on silver, everyone else on free.
func Demo() *Service {
	return New(map[string]Plan{
		"gold":   {Limit: 20, Window: "1s", Burst: 10},
		"silver": {Limit: 5, Window: "1s", Burst: 2},
		"free":   {Limit: 1, Window: "1s", Burst: 1},
	}, map[string]string{"acme": "gold", "initech": "silver"}, "free")
}

// SetTenant moves a tenant to a plan.
func (s *Service) SetTenant(tenant, plan string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenants[tenant] = plan
}

// Lookups returns the lookups received so far.
func (s *Service) Lookups() []Lookup {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Lookup(nil), s.lookups...)
}

// Count is how many lookups named tenant.
func (s *Service) Count(tenant string) int {
	n := 0
	for _, l := range s.Lookups() {
		if l.Headers["x-tenant-id"] == tenant {
			n++
		}
	}
	return n
}

func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST a lookup", http.StatusMethodNotAllowed)
		return
	}
	var l Lookup
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&l); err != nil {
		http.Error(w, "lookup is not JSON: "+err.Error(), http.StatusBadRequest)
		return
	}
	tenant := l.Headers["x-tenant-id"]
	s.mu.Lock()
	s.lookups = append(s.lookups, l)
	name, ok := s.tenants[tenant]
	if !ok {
		name = s.defaultPlan
	}
	plan, ok := s.plans[name]
	s.mu.Unlock()
	if !ok || tenant == "" {
		http.Error(w, "no plan", http.StatusNotFound)
		return
	}
	w.Header().Set("content-type", "application/json")
	_ = json.NewEncoder(w).Encode(Answer{Plan: plan, TenantKey: tenant})
}
