package config

// defaultClientIP is client_ip when it is absent or empty: the peer, with
// Envoy's own hop the one trusted.
func defaultClientIP() ClientIP { return ClientIP{Source: ClientIPPeer, TrustedHops: 1} }

func (p *parser) clientIP(o *object) ClientIP {
	c := defaultClientIP()
	c.Sources = p.clientIPSources(o)
	if v, ok := readEnum(o, "source", clientIPSourceNames); ok {
		c.Source = v
	} else if o.has("source") {
		// Which of trusted_hops or header is misplaced depends on the
		// source meant; the source error is the one to fix.
		return c
	}
	if c.Source == ClientIPXFF || hasSource(c.Sources, ClientIPXFF) {
		if n, ok := o.integer("trusted_hops", 1, maxTrustedHops); ok {
			c.TrustedHops = int(n)
		}
	} else {
		o.onlyWith("trusted_hops", `source "xff" or sources with "xff"`)
	}
	if c.Source == ClientIPHeader {
		c.Header = o.requestHeaderName("header", `required with source "header"`, "")
	} else {
		o.onlyWith("header", `source "header"`)
	}
	return c
}
