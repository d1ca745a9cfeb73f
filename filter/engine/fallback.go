package engine

import (
	"errors"

	"github.com/sluice-proxy/sluice/filter/distributed"
)

// enterFallback logs, once per transition, that this worker's remote
// limits fell back to their failure_policy: one WARN when the first
// request falls back after the backend answered, not one per request.
func (p *Plugin) enterFallback(rr *remoteReq, err error) {
	if p.inFallback {
		return
	}
	p.inFallback = true
	cause := "backend_error"
	if errors.Is(err, distributed.ErrBreakerOpen) {
		cause = "backend_breaker_open"
	}
	b := make([]byte, 0, 128)
	b = append(b, `{"sluice":"backend_fallback","limit":`...)
	b = appendJSONString(b, rr.l.cfg.Name)
	b = append(b, `,"failure_policy":`...)
	b = appendJSONString(b, rr.policy.String())
	b = append(b, `,"cause":`...)
	b = appendJSONString(b, cause)
	p.log.Warn(string(append(b, '}')))
}

// leaveFallback logs the backend answering again after a fallback.
func (p *Plugin) leaveFallback() {
	if p.inFallback {
		p.inFallback = false
		p.log.Info(`{"sluice":"backend_fallback_ended"}`)
	}
}
