package config

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/filter/backend"
	"github.com/sluice-proxy/sluice/internal/enum"
	"github.com/sluice-proxy/sluice/limiter"
)

var (
	limitFields        = fieldsOf[wireLimit]()
	onLimitFields      = fieldsOf[wireOnLimit]()
	rateFields         = fieldsOf[wireRate]()
	costFields         = fieldsOf[wireCost]()
	responseCostFields = fieldsOf[wireResponseCost]()
)

// replacesRef is one replaces entry, kept until every limit name is known.
type replacesRef struct {
	path string
	at   int
	name string
}

func (p *parser) limits(cfg *Config, path string, items []gjson.Result) {
	refs := make([][]replacesRef, len(items))
	p.namedEntries(path, items, limitFields, func(i int, o *object) string {
		l, r := p.limit(o, cfg.Backend)
		refs[i] = r
		cfg.Limits = append(cfg.Limits, l)
		return l.Name
	}, func() {
		cfg.Limits = append(cfg.Limits, Limit{OverrideBy: -1})
	})
	p.resolveReplaces(cfg, path, refs)
}

func (p *parser) name(o *object) string {
	s, ok := o.str("name")
	if !ok {
		if !o.has("name") {
			o.errorf("name", "required")
		}
		return ""
	}
	if !validName(s) {
		o.errorf("name", "must be 1-%d characters of A-Z a-z 0-9 _ -, got %s", maxNameLen, Quote(s))
		return ""
	}
	return s
}

// defaultLimit is a limit named name with every default a limit entry and
// the external block share.
func defaultLimit(name string) Limit {
	return Limit{
		Name:       name,
		Cost:       1,
		OverrideBy: -1,
		Instances:  1,
		OnLimit:    OnLimit{Action: ActionReject, Status: DefaultLimitStatus},
		Slots:      limiter.DefaultSlots,
		Rollout:    FullRollout,

		ForgetMaxUsed: limiter.DefaultForgetMaxUsed,
	}
}

func (p *parser) limit(o *object, backend *Backend) (Limit, []replacesRef) {
	l := defaultLimit(p.name(o))
	l.Key = []KeyPart{{Kind: KeyClientIP}}
	l.Disabled = p.disabled(o)
	p.slots(o, &l)
	if m := o.child("match", matchFields...); m != nil {
		l.Match = p.match(m)
	}
	if items, ok := o.array("key", ""); ok {
		l.Key = p.key(o.path1("key"), items)
	}
	if v, ok := readEnum(o, "algorithm", algorithmNames); ok {
		l.Algorithm = v
	}
	// The mode is read before the rates, which are checked against it.
	p.mode(o, &l, backend)
	if r, ok := p.rate(o, l.Algorithm); ok {
		l.Rate = r
		p.rateFits(o, l.Mode, l.Algorithm, r)
	}
	maxPath, maxAt := p.cost(o, &l)
	p.costFromResponse(o, &l)
	rateOK := l.Rate.Limit > 0
	if c := l.Rate.Capacity(l.Algorithm); rateOK && l.maxCost() > c {
		p.errorf(maxPath, maxAt, "%d is more than the capacity %d, so no request could pass", l.maxCost(), c)
	}
	p.overrides(o, &l)
	if ch := l.CostHeader; ch != nil && ch.Max == 0 {
		// max defaults to what every rate of the limit can grant at once.
		ch.Max = ch.Default
		if rateOK {
			ch.Max = max(ch.Default, l.Rate.Capacity(l.Algorithm))
			for _, r := range l.Overrides {
				if r.Limit > 0 {
					ch.Max = max(ch.Default, min(ch.Max, r.Capacity(l.Algorithm)))
				}
			}
		}
	}

	if v, ok := readEnum(o, "on_missing_key", missingKeyActionNames); ok {
		l.OnMissingKey = v
	}
	p.onLimit(o, &l)
	if b, ok := o.boolean("shadow"); ok {
		l.Shadow = b
		if b && l.OnLimit.Action == ActionDelay {
			o.errorf("shadow", `cannot be combined with on_limit.action "delay": a shadow limit never holds requests`)
		}
	}
	p.rollout(o, &l)
	var refs []replacesRef
	if items, ok := o.array("replaces", "must not be empty; omit it to replace nothing"); ok {
		for i, item := range items {
			ipath := IndexPath(o.path1("replaces"), i)
			if item.Type != gjson.String || item.Str == "" {
				p.errorf(ipath, item.Index, "must be a limit name")
				continue
			}
			refs = append(refs, replacesRef{path: ipath, at: item.Index, name: item.Str})
		}
	}
	return l, refs
}

// slots reads slots, overflow_slots and forget_max_used, shared by limits
// and the external block. The bounds are the limiter's: past MaxSlots one
// limit's shared data alone would pass 100 MB.
func (p *parser) slots(o *object, l *Limit) {
	if n, ok := o.integer("slots", 1, limiter.MaxSlots); ok {
		l.Slots = int(n)
	}
	if n, ok := o.integer("overflow_slots", 1, limiter.MaxSlots); ok {
		l.OverflowSlots = int(n)
		if n > int64(l.Slots) {
			o.errorf("overflow_slots", "%d is more than slots (%d)", n, l.Slots)
		}
	}
	if n, ok := o.integer("forget_max_used", 0, limiter.MaxRate); ok {
		l.ForgetMaxUsed = n
	}
}

// mode reads mode, failure_policy and instances, shared by limits and the
// external block.
func (p *parser) mode(o *object, l *Limit, backend *Backend) {
	modeOK := true
	if v, ok := readEnum(o, "mode", modeNames); ok {
		l.Mode = v
	} else if o.has("mode") {
		modeOK = false
	}
	switch {
	case !modeOK:
		// The mode error already explains the problem; guessing which of
		// failure_policy or instances is misplaced would only add noise.
	case l.Mode == ModeLocal:
		o.onlyWith("failure_policy", `mode "global" or "hybrid"`)
		o.onlyWith("instances", `mode "global" or "hybrid"`)
	default:
		if l.Mode == ModeHybrid && l.Algorithm != TokenBucket && l.Algorithm != FixedWindow {
			o.errorf("mode", `"hybrid" leases tokens and needs algorithm "token_bucket" (or "fixed_window" with a calendar window), not %q`, l.Algorithm)
		}
		if backend == nil {
			o.errorf("mode", `%q needs a "backend" block naming the Redis cluster`, l.Mode)
		} else {
			l.FailurePolicy = backend.FailurePolicy
			l.Instances = backend.Instances
		}
		if v, ok := readEnum(o, "failure_policy", failurePolicyNames); ok {
			l.FailurePolicy = v
		}
		if n, ok := o.integer("instances", 1, maxInstances); ok {
			l.Instances = int(n)
		}
	}
}

// onLimit reads on_limit into l.OnLimit.
func (p *parser) onLimit(o *object, l *Limit) {
	if c := o.child("on_limit", onLimitFields...); c != nil {
		actionOK := true
		if v, ok := readEnum(c, "action", limitActionNames); ok {
			l.OnLimit.Action = v
		} else if c.has("action") {
			actionOK = false
		}
		switch {
		case !actionOK:
			// Whether max_delay belongs depends on the action meant.
		case l.OnLimit.Action == ActionDelay:
			l.OnLimit.MaxDelay = DefaultMaxDelay
			if d, ok := c.duration("max_delay", time.Millisecond, maxMaxDelay); ok {
				l.OnLimit.MaxDelay = d
			}
		default:
			c.onlyWith("max_delay", `action "delay"`)
		}
		if n, ok := c.integer("status", 400, 599); ok {
			l.OnLimit.Status = int(n)
		}
	}
}

// rate reads requests_per_second | limit+window, and burst, from a limit or
// an override object.
func (p *parser) rate(o *object, alg Algorithm) (Rate, bool) {
	var r Rate
	o.conflicts("limit", "requests_per_second")
	o.conflicts("window", "requests_per_second")
	ok := true
	switch {
	case o.has("requests_per_second"):
		n, good := o.integer("requests_per_second", 1, maxCount)
		r = Rate{Limit: n, Window: time.Second}
		ok = good && !o.has("limit") && !o.has("window")
	case o.has("limit") || o.has("window"):
		n, good := o.integer("limit", 1, maxCount)
		var d time.Duration
		goodW := false
		if cal, isCal := calendarWindow(o.fields["window"]); isCal {
			r.Calendar, d, goodW = cal, cal.Longest(), p.calendarAlgorithm(o, alg, cal)
		} else if w, has := o.fields["window"]; has && (w.Type != gjson.String || !durationSyntax(w.Str)) {
			o.errorf("window", `must be a duration string such as "500ms", "60s" or "1m", or a calendar period "day", "week" or "month"`)
		} else {
			d, goodW = o.duration("window", time.Millisecond, maxWindow)
		}
		if !o.has("limit") {
			o.errorf("limit", "required with window")
		}
		if !o.has("window") {
			o.p.errorf(o.path1("window"), o.offset("limit"), "required with limit")
		}
		r.Limit, r.Window = n, d
		ok = good && goodW
	default:
		o.p.errorf(o.path, o.at, "one of requests_per_second or limit with window is required")
		ok = false
	}
	if r.Calendar != limiter.NoCalendar {
		if off, good := p.utcOffset(o); good {
			r.Offset = off
		} else {
			ok = false
		}
	} else {
		o.onlyWith("window_offset", `a calendar window ("day", "week" or "month")`)
	}
	if alg == TokenBucket {
		if n, good := o.integer("burst", 0, maxCount); good {
			r.Burst = n
		} else if o.has("burst") {
			ok = false
		}
	} else {
		o.onlyWith("burst", `algorithm "token_bucket"`)
	}
	if !ok {
		r.Limit = 0
	}
	return r, ok
}

// rateFits checks a rate within the field bounds against what enforces
// it: the limiter's own bounds (an empty token bucket must refill within
// int64 nanoseconds, which a large burst over a long window can exceed)
// and, in global and hybrid mode, the range the Redis scripts compute
// exactly. The filter builds its tables and commands from the same
// limiter.Limit, so a config Parse accepts never fails at plugin start.
func (p *parser) rateFits(o *object, mode Mode, alg Algorithm, r Rate) {
	if mode == ModeHybrid && alg == FixedWindow && r.Calendar == limiter.NoCalendar {
		o.errorf("window", `"hybrid" with algorithm "fixed_window" needs a calendar window ("day", "week" or "month"): leases of a duration window would mostly expire unspent at its end`)
		return
	}
	if alg == SlidingLog && r.Limit > limiter.MaxLogLimit {
		field := "limit"
		if o.has("requests_per_second") {
			field = "requests_per_second"
		}
		o.errorf(field, `must be at most %d with algorithm "sliding_log": the log keeps one entry per request admitted within the window, in one shared-data value`, limiter.MaxLogLimit)
		return
	}
	if alg == SlidingLog && r.Window%time.Microsecond != 0 {
		o.errorf("window", `must be a whole number of microseconds with algorithm "sliding_log"`)
		return
	}
	lim := r.Limiter(alg)
	if err := lim.Validate(); err != nil {
		p.errorf(o.path, o.at, "%s", strings.TrimPrefix(err.Error(), "limiter: "))
		return
	}
	var err error
	switch {
	case mode == ModeGlobal:
		_, err = backend.Decide(lim, "", 1)
	case mode == ModeHybrid && (alg == TokenBucket || alg == FixedWindow):
		_, err = backend.Lease(lim, "", 1, 0)
	}
	switch {
	case err == nil:
	case r.Window%time.Microsecond != 0:
		o.errorf("window", "must be a whole number of microseconds with mode %q: the Redis scripts count time in microseconds", mode)
	case errors.Is(err, backend.ErrOutOfRange):
		p.errorf(o.path, o.at, `capacity × window is too large for mode %q: the Redis scripts compute exactly only below 2^53 microsecond units; use a shorter window, a smaller limit or mode "local"`, mode)
	default:
		p.errorf(o.path, o.at, "mode %q: %s", mode, strings.TrimPrefix(err.Error(), "backend: "))
	}
}

func (p *parser) overrides(o *object, l *Limit) {
	ov, present := o.fields["overrides"]
	if !present {
		o.onlyWith("override_by", "overrides")
		return
	}
	opath := o.path1("overrides")
	if !ov.IsObject() {
		o.errorf("overrides", "must be an object")
		return
	}
	switch {
	case len(l.Key) == 0:
		o.errorf("overrides", "needs a key with at least one part; with key [] there is no value to match")
	case o.has("override_by"):
		s, ok := o.str("override_by")
		if !ok {
			break
		}
		part, err := parseKeyPart(s)
		if err != "" {
			o.errorf("override_by", "%s", err)
			break
		}
		for i, k := range l.Key {
			if k.Same(part) {
				l.OverrideBy = i
			}
		}
		if l.OverrideBy < 0 {
			o.errorf("override_by", "%s is not a part of key", Quote(s))
		}
	case len(l.Key) == 1:
		l.OverrideBy = 0
	default:
		o.errorf("overrides", "key has %d parts; set override_by to the part whose value selects the override", len(l.Key))
	}
	l.Overrides = map[string]Rate{}
	ov.ForEach(func(k, v gjson.Result) bool {
		name := k.String()
		vpath := FieldPath(opath, name)
		_, dupAction := l.OverrideActions[name]
		if _, dup := l.Overrides[name]; dup || dupAction {
			p.errorf(vpath, k.Index, "duplicate field")
			return true
		}
		if name == "" {
			p.errorf(vpath, k.Index, "must not be empty")
		}
		if p.overrideAction(l, name, vpath, v) {
			return true
		}
		oo := p.object(vpath, v, rateFields...)
		if oo == nil {
			l.Overrides[name] = Rate{}
			return true
		}
		r, ok := p.rate(oo, l.Algorithm)
		if ok && l.maxCost() > r.Capacity(l.Algorithm) {
			p.errorf(vpath, v.Index, "capacity %d is less than %s %d, so no request could pass", r.Capacity(l.Algorithm), l.maxCostName(), l.maxCost())
		}
		if ok {
			p.rateFits(oo, l.Mode, l.Algorithm, r)
		}
		l.Overrides[name] = r
		return true
	})
	if len(l.Overrides)+len(l.OverrideActions) == 0 {
		o.errorf("overrides", "must not be empty")
	}
	if l.OverrideBy >= 0 && l.OverrideBy < len(l.Key) && l.Key[l.OverrideBy].Kind == KeyClientIP {
		p.overridePrefixes(l, opath, ov)
	}
}

// cost reads cost: a fixed integer, or {header, default, max} for a cost
// the client sends. It returns where capacity errors are reported: the
// member holding the largest cost a request can have.
func (p *parser) cost(o *object, l *Limit) (path string, at int) {
	v, present := o.fields["cost"]
	switch {
	case !present:
		return o.path1("cost"), o.offset("cost")
	case v.IsObject():
	case v.Type == gjson.Number:
		if n, ok := o.integer("cost", 1, maxCount); ok {
			l.Cost = n
		}
		return o.path1("cost"), v.Index
	default:
		o.errorf("cost", "must be an integer or an object with header, default and max")
		return o.path1("cost"), v.Index
	}
	c := o.child("cost", costFields...)
	ch := &CostHeader{Default: 1}
	ch.Header = c.requestHeaderName("header", "required", "")
	if n, ok := c.integer("default", 1, maxCount); ok {
		ch.Default = n
	}
	path, at = c.path1("default"), c.offset("default")
	if n, ok := c.integer("max", 1, maxCount); ok {
		path, at = c.path1("max"), c.offset("max")
		if n < ch.Default {
			c.errorf("max", "must be >= default (%d)", ch.Default)
		} else {
			ch.Max = n
		}
	}
	l.Cost, l.CostHeader = ch.Default, ch
	return path, at
}

// costFromResponse reads cost_from_response: {header | json, default,
// max_body_bytes}.
func (p *parser) costFromResponse(o *object, l *Limit) {
	c := o.child("cost_from_response", responseCostFields...)
	if c == nil {
		return
	}
	rc := &ResponseCost{Default: 1}
	rc.Header = c.headerName("header", "")
	if s, ok := c.str("json"); ok {
		if path, valid := usagePath(s); valid {
			rc.JSON = path
		} else {
			c.errorf("json", "invalid path %s: member names joined with dots, none empty", Quote(s))
		}
	}
	switch {
	case c.has("header") && c.has("json"):
		c.errorf("json", "cannot be combined with header: the cost is read from one place")
	case !c.has("header") && !c.has("json"):
		c.errorf("header", "required, or json")
	}
	if n, ok := c.integer("default", 1, maxCount); ok {
		rc.Default = n
	}
	if c.has("max_body_bytes") {
		if !c.has("json") {
			c.errorf("max_body_bytes", "only valid with json")
		}
		if n, ok := c.integer("max_body_bytes", 1, MaxResponseBodyBytes); ok {
			rc.MaxBodyBytes = n
		}
	} else if c.has("json") {
		rc.MaxBodyBytes = DefaultMaxBodyBytes
	}
	l.CostFromResponse = rc
	switch {
	case o.has("cost"):
		o.errorf("cost_from_response", "cannot be combined with cost: the request takes one unit when admitted and the response's cost is charged after")
	case l.Algorithm != TokenBucket:
		o.errorf("cost_from_response", `only valid with algorithm "token_bucket": a window cannot carry the debt a response's cost can leave`)
	}
}

// usagePath splits a dotted path into its member names.
func usagePath(s string) ([]string, bool) {
	path := strings.Split(s, ".")
	for _, name := range path {
		if name == "" {
			return nil, false
		}
	}
	return path, true
}

// maxCost is the largest cost one request of l can take at admission.
func (l *Limit) maxCost() int64 {
	if l.CostHeader != nil && l.CostHeader.Max > 0 {
		return l.CostHeader.Max
	}
	return l.Cost
}

func (l *Limit) maxCostName() string {
	switch {
	case l.CostHeader == nil:
		return "cost"
	case l.CostHeader.Max > 0:
		return "cost.max"
	}
	return "cost.default"
}

// resolveReplaces turns names into indexes and rejects cycles: limits that
// replace each other would all be disabled whenever they all match.
func (p *parser) resolveReplaces(cfg *Config, path string, refs [][]replacesRef) {
	byName := map[string]int{}
	for i := range cfg.Limits {
		if n := cfg.Limits[i].Name; n != "" {
			if _, dup := byName[n]; !dup {
				byName[n] = i
			}
		}
	}
	for i, rs := range refs {
		seen := map[int]bool{}
		for _, r := range rs {
			j, ok := byName[r.name]
			switch {
			case !ok:
				p.errorf(r.path, r.at, "unknown limit %s", Quote(r.name))
			case j == i:
				p.errorf(r.path, r.at, "a limit cannot replace itself")
			case seen[j]:
				p.errorf(r.path, r.at, "duplicate entry %s", Quote(r.name))
			default:
				seen[j] = true
				cfg.Limits[i].Replaces = append(cfg.Limits[i].Replaces, j)
			}
		}
	}
	n := len(cfg.Limits)
	reach := make([][]bool, n)
	for i := range cfg.Limits {
		reach[i] = make([]bool, n)
		stack := append([]int(nil), cfg.Limits[i].Replaces...)
		for len(stack) > 0 {
			j := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if reach[i][j] {
				continue
			}
			reach[i][j] = true
			stack = append(stack, cfg.Limits[j].Replaces...)
		}
	}
	for i := 0; i < n; i++ {
		if !reach[i][i] {
			continue
		}
		// Report each cycle once, at its first limit in document order.
		first := true
		for j := 0; j < i; j++ {
			if reach[i][j] && reach[j][i] {
				first = false
				break
			}
		}
		if !first {
			continue
		}
		var members []string
		for j := 0; j < n; j++ {
			if reach[i][j] && reach[j][i] {
				members = append(members, strconv.Quote(cfg.Limits[j].Name))
			}
		}
		at := 0
		if len(refs[i]) > 0 {
			at = refs[i][0].at
		}
		p.errorf(FieldPath(IndexPath(path, i), "replaces"), at, "cycle between limits %s", strings.Join(members, ", "))
	}
}

// calendarWindow reports a window that names a calendar period rather than
// a duration.
func calendarWindow(v gjson.Result) (limiter.Calendar, bool) {
	if v.Type != gjson.String {
		return limiter.NoCalendar, false
	}
	return calendarNames.Parse(v.Str)
}

var calendarNames = enum.Of("Calendar", limiter.CalendarDay, limiter.CalendarWeek, limiter.CalendarMonth)

// calendarAlgorithm checks that alg can count calendar periods: only a fixed
// window can, because its windows are the periods; a token bucket refills
// continuously and the sliding algorithms look back one constant length,
// and a calendar period has neither property.
func (p *parser) calendarAlgorithm(o *object, alg Algorithm, cal limiter.Calendar) bool {
	if alg == FixedWindow {
		return true
	}
	o.errorf("window", `%q is a calendar period, only valid with algorithm "fixed_window", not %q: token_bucket refills continuously and sliding_window and sliding_log look back one constant length, which calendar periods do not have`, cal, alg)
	return false
}

// utcOffset reads window_offset, "+HH:MM" or "-HH:MM" (default "+00:00",
// UTC), in seconds east of UTC.
func (p *parser) utcOffset(o *object) (int32, bool) {
	if !o.has("window_offset") {
		return 0, true
	}
	s, ok := o.str("window_offset")
	if !ok {
		return 0, false
	}
	off, err := ParseUTCOffset(s)
	if err != nil {
		o.errorf("window_offset", "%v, got %s", err, Quote(s))
		return 0, false
	}
	return off, true
}

// ParseUTCOffset parses a fixed UTC offset written "+HH:MM" or "-HH:MM"
// (RFC 3339's time-numoffset), within ±18:00, into seconds east of UTC.
func ParseUTCOffset(s string) (int32, error) {
	digit := func(c byte) (int32, bool) { return int32(c - '0'), c >= '0' && c <= '9' }
	if len(s) != 6 || (s[0] != '+' && s[0] != '-') || s[3] != ':' {
		return 0, errors.New(`must be a UTC offset "+HH:MM" or "-HH:MM"`)
	}
	h1, ok1 := digit(s[1])
	h2, ok2 := digit(s[2])
	m1, ok3 := digit(s[4])
	m2, ok4 := digit(s[5])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, errors.New(`must be a UTC offset "+HH:MM" or "-HH:MM"`)
	}
	h, m := h1*10+h2, m1*10+m2
	if m > 59 {
		return 0, errors.New("minutes must be 00-59")
	}
	off := (h*60 + m) * 60
	if off > int32(limiter.MaxOffset/time.Second) {
		return 0, errors.New("must be within -18:00 and +18:00")
	}
	if s[0] == '-' {
		off = -off
	}
	return off, nil
}
