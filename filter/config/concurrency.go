package config

import "github.com/tidwall/gjson"

var concurrencyFields = fieldsOf[wireConcurrency]()

func (p *parser) concurrency(cfg *Config, path string, items []gjson.Result) {
	p.namedEntries(path, items, concurrencyFields, func(_ int, o *object) string {
		c := p.concurrencyLimit(o)
		cfg.Concurrency = append(cfg.Concurrency, c)
		return c.Name
	}, func() {
		cfg.Concurrency = append(cfg.Concurrency, defaultConcurrencyLimit())
	})
}

// defaultConcurrencyLimit is a concurrency entry before its fields are
// read: one count for every matching request.
func defaultConcurrencyLimit() ConcurrencyLimit {
	return ConcurrencyLimit{Key: []KeyPart{}, Status: DefaultConcurrencyStatus}
}

func (p *parser) concurrencyLimit(o *object) ConcurrencyLimit {
	c := defaultConcurrencyLimit()
	c.Name = p.name(o)
	c.Disabled = p.disabled(o)
	if m := o.child("match", matchFields...); m != nil {
		c.Match = p.match(m)
	}
	if items, ok := o.array("key", ""); ok {
		c.Key = p.key(o.path1("key"), items)
	}
	if n, ok := o.integer("max_in_flight", 1, maxCount); ok {
		c.MaxInFlight = n
	} else if !o.has("max_in_flight") {
		o.errorf("max_in_flight", "required")
	}
	if n, ok := o.integer("status", 400, 599); ok {
		c.Status = int(n)
	}
	if b, ok := o.boolean("shadow"); ok {
		c.Shadow = b
	}
	return c
}
