package config

import (
	"strings"

	"github.com/tidwall/gjson"
)

var (
	responseFields    = fieldsOf[wireResponse]()
	headerFamilyNames = []string{"x-ratelimit", "ratelimit", "retry-after"}
)

// defaultResponse is response when it is absent or empty.
func defaultResponse() Response {
	return Response{Headers: AllHeaderFamilies, HeadersOnAllowed: true, Body: BodyJSON, NearLimitRatio: DefaultNearLimitRatio}
}

func (p *parser) response(o *object) Response {
	r := defaultResponse()
	if items, ok := o.array("headers", ""); ok {
		r.Headers = p.headerFamilies(o.path1("headers"), items)
	}
	if b, ok := o.boolean("headers_on_allowed"); ok {
		r.HeadersOnAllowed = b
	}
	if v, ok := readEnum(o, "body", bodyNames); ok {
		r.Body = v
	}
	p.responseContract(o, &r)
	return r
}

// headerFamilies reads response.headers, distinct names of
// headerFamilyNames.
func (p *parser) headerFamilies(path string, items []gjson.Result) HeaderFamilies {
	var families HeaderFamilies
	for i, item := range items {
		ipath := IndexPath(path, i)
		idx := -1
		if item.Type == gjson.String {
			for j, n := range headerFamilyNames {
				if item.Str == n {
					idx = j
				}
			}
		}
		if idx < 0 {
			p.errorf(ipath, item.Index, "unknown header family %s; want one of %s", Excerpt(item.Raw), strings.Join(headerFamilyNames, ", "))
			continue
		}
		f := HeaderFamilies(1) << idx
		if families.Has(f) {
			p.errorf(ipath, item.Index, "duplicate header family %s", Quote(item.Str))
		}
		families |= f
	}
	return families
}
