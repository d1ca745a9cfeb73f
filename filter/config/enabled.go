package config

// disabled reads "enabled" of a limit, breaker or concurrency limit: false
// keeps the entry in the configuration (its name stays taken and its
// fields are still checked, so switching it back on cannot surprise) but
// the filter neither evaluates nor counts it.
func (p *parser) disabled(o *object) bool {
	b, ok := o.boolean("enabled")
	return ok && !b
}
