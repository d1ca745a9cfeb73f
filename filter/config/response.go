package config

import (
	"github.com/tidwall/gjson"

	"github.com/sluice-proxy/sluice/internal/enum"
)

var responseFields = fieldsOf[wireResponse]()

// headerFamilyBit names the bits of HeaderFamilies, by their index.
type headerFamilyBit uint8

var headerFamilyNames = enum.New[headerFamilyBit]("HeaderFamily", "x-ratelimit", "ratelimit", "retry-after")

func (b headerFamilyBit) family() HeaderFamilies { return HeaderFamilies(1) << b }

// names are f's families' names, in bit order.
func (f HeaderFamilies) names() []string {
	names := []string{}
	for b := headerFamilyBit(0); b.family() <= AllHeaderFamilies; b++ {
		if f.Has(b.family()) {
			names = append(names, headerFamilyNames.Name(b))
		}
	}
	return names
}

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
		b, ok := headerFamilyNames.Parse(item.Str)
		if item.Type != gjson.String || !ok {
			p.errorf(ipath, item.Index, "unknown header family %s; want one of %s", Excerpt(item.Raw), headerFamilyNames.List())
			continue
		}
		f := b.family()
		if families.Has(f) {
			p.errorf(ipath, item.Index, "duplicate header family %s", Quote(item.Str))
		}
		families |= f
	}
	return families
}
