package engine

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/sluice-proxy/sluice/filter/config"
	"github.com/sluice-proxy/sluice/limiter"
)

// verdict is what evaluate decided.
type verdict uint8

const (
	verdictAllow verdict = iota
	verdictReject
	verdictDelay
	// verdictPending: waiting for Redis; a reply callback finishes it.
	verdictPending
)

func (h *Stream) evaluateShadows(shadows []limiter.Request, shadowLim []*limitRuntime, ns int64) {
	for i, r := range shadows {
		l := shadowLim[i]
		res, err := r.Table.AllowN(r.Key, ns, r.Cost)
		if err != nil {
			h.plugin.log.Warnf("sluice: limiter store: %v", err)
		}
		l.exportTableStats()
		if h.trace != nil {
			h.trace.traceResults(shadowLim[i:i+1], []limiter.Result{res})
		}
		if res.Allowed {
			l.admitted(r.Table.Limit(), res)
		} else {
			l.metrics.shadowLimited.Increment(1)
			h.logRejection("shadow_limited", l, res)
			h.dropCharge(l)
			h.tellUpstream(l)
		}
	}
}

// quotaOf describes a decision for the rate-limit headers. The window comes
// from the result, so an override with its own window reports that one.
func quotaOf(l *limitRuntime, res limiter.Result) quota {
	window := res.Period
	if window == 0 {
		window = l.cfg.Rate.Window // a contention or store-error result
	}
	return quota{
		name:       l.cfg.Name,
		limit:      res.Limit,
		window:     window,
		remaining:  res.Remaining,
		retryAfter: res.RetryAfter,
		resetAfter: res.ResetAfter,
		consts:     l.headerConsts,
	}
}

// onLimited applies the denying limit's on_limit.
func (h *Stream) onLimited(l *limitRuntime, res limiter.Result, now time.Time) verdict {
	p := h.plugin
	if l.cfg.OnLimit.Action == config.ActionDelay && res.RetryAfter > 0 {
		if !h.delayed {
			h.delayDeadline = h.start.Add(l.cfg.OnLimit.MaxDelay)
		}
		wakeAt := now.Add(res.RetryAfter)
		if !wakeAt.After(h.delayDeadline) {
			if !h.delayed {
				h.delayed = true
				l.metrics.delayed.Increment(1)
			}
			h.delayUntil = wakeAt
			p.park(h, waitDelay)
			return verdictDelay
		}
	}
	l.metrics.limited.Increment(1)
	h.logRejection("rate_limited", l, res)
	q := quotaOf(l, res)
	headers, _ := appendRateLimitHeaders(nil, nil, p.cfg.Response.Headers, q, now, true)
	ct, body := rateLimitedBody(p.cfg.Response.Body, l.cfg.Name, l.cfg.OnLimit.Status, res.RetryAfter)
	h.reject(config.ReplyRateLimited, replyValues{limit: l.cfg.Name, limitValue: q.limit, window: q.window, retryAfter: res.RetryAfter},
		l.cfg.OnLimit.Status, headers, ct, body)
	return verdictReject
}

func (h *Stream) rejectMissingKey(l *limitRuntime) {
	p := h.plugin
	h.logRejection("missing_key", l, limiter.Result{})
	ct, body := missingKeyBody(p.cfg.Response.Body, l.cfg.Name, l.cfg.OnLimit.Status)
	h.reject(config.ReplyMissingKey, replyValues{limit: l.cfg.Name}, l.cfg.OnLimit.Status, nil, ct, body)
}

// sendLocal answers the request itself.
func (h *Stream) sendLocal(status int, headers [][2]string, contentType string, body []byte) {
	if contentType != "" {
		headers = append(headers, [2]string{"content-type", contentType})
	}
	// Every local reply carries response.reply_headers.
	headers = append(headers, h.plugin.cfg.Response.ReplyHeaders...)
	h.localReply = true
	if err := h.plugin.host.Stream.Reply(status, headers, body); err != nil {
		h.plugin.log.Errorf("sluice: sending local reply: %v", err)
	}
}

// logRejection writes one JSON line per rejection. It names the key's
// kinds, never its values: client addresses are personal data and do not
// belong in proxy logs by default.
func (h *Stream) logRejection(event string, l *limitRuntime, res limiter.Result) {
	b := appendRejectionLog(make([]byte, 0, 160), event, l.cfg.Name, l.keyKinds)
	b = append(b, `,"limit_value":`...)
	b = strconv.AppendInt(b, res.Limit, 10)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, retryAfterSeconds(res.RetryAfter), 10)
	b = append(b, '}')
	h.plugin.log.Info(string(b))
}

// appendRejectionLog starts the JSON line of a rejection by a rate or
// concurrency limit: the event, the limit and its key's kinds.
func appendRejectionLog(b []byte, event, limit, keyKinds string) []byte {
	b = append(b, `{"sluice":`...)
	b = appendJSONString(b, event)
	b = append(b, `,"limit":`...)
	b = appendJSONString(b, limit)
	b = append(b, `,"key":`...)
	return appendJSONString(b, keyKinds)
}

// arenaString views key bytes as a string without a copy. For the worker's
// key arena that is safe only until the next evaluation overwrites it:
// limiter tables hash keys and do not keep them, and a request that waits
// for Redis copies its local keys first (startRemote).
func arenaString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// firstValue is the first value of header name in headers.
func firstValue(headers [][2]string, name string) (string, bool) {
	for _, kv := range headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}
