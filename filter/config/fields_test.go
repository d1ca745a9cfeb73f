package config

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// wireProbe stands for a wire struct that gains a field: embedded structs
// contribute theirs, untagged and "-" fields none.
type wireProbe struct {
	wireBucketRate
	Added    string `json:"added_field,omitempty"`
	Skipped  string `json:"-"`
	internal string
}

func TestFieldsOfFollowsTheTags(t *testing.T) {
	got := fieldsOf[wireProbe]()
	want := []string{"requests_per_second", "limit", "window", "burst", "added_field"}
	if !slices.Equal(got, want) {
		t.Errorf("fieldsOf[wireProbe]() = %q, want %q", got, want)
	}
	_ = wireProbe{}.internal

	// The parser knows a field because its wire struct has it: the probe's
	// list, with no name written out, admits added_field and nothing else.
	p := &parser{}
	o := p.object("x", gjson.Parse(`{"added_field": "v", "limit": 1, "other": 1}`), fieldsOf[wireProbe]()...)
	if s, ok := o.str("added_field"); !ok || s != "v" {
		t.Errorf("added_field read as %q, %v", s, ok)
	}
	if len(p.errs) != 1 || p.errs[0].Error() != "x.other: unknown field" {
		t.Errorf("errors %v, want only x.other: unknown field", p.errs)
	}
}

// wireObject is an object of the configuration: where it stands and the
// wire struct that encodes it.
type wireObject struct {
	steps []wireStep
	typ   reflect.Type
}

// wireStep is a member name, or element 0 of the array before it.
type wireStep struct {
	name  string
	index bool
}

func count(chain []reflect.Type, t reflect.Type) int {
	n := 0
	for _, c := range chain {
		if c == t {
			n++
		}
	}
	return n
}

func (w wireObject) path() string {
	path := ""
	for _, s := range w.steps {
		if s.index {
			path = IndexPath(path, 0)
		} else {
			path = FieldPath(path, s.name)
		}
	}
	return path
}

// document is a configuration holding w's object with every member of its
// wire struct set to null, and the member unknownProbe.
func (w wireObject) document() string {
	members := []string{strconv.Quote(unknownProbe) + ": null"}
	for _, f := range appendJSONNames(nil, w.typ) {
		members = append(members, strconv.Quote(f)+": null")
	}
	doc := "{" + strings.Join(members, ", ") + "}"
	for i := len(w.steps) - 1; i >= 0; i-- {
		if w.steps[i].index {
			doc = "[" + doc + "]"
		} else {
			doc = "{" + strconv.Quote(w.steps[i].name) + ": " + doc + "}"
		}
	}
	return doc
}

const unknownProbe = "zz_unknown_probe"

// wireDynamic are the wire fields whose type reflection cannot follow:
// an integer or an object, a map of rates or actions.
var wireDynamic = map[string]wireObject{
	"cost":      {steps: []wireStep{{name: "cost"}}, typ: reflect.TypeFor[wireCost]()},
	"overrides": {steps: []wireStep{{name: "overrides"}, {name: "v"}}, typ: reflect.TypeFor[wireRate]()},
}

// wireObjects walks the wire structs from wireConfig: every object the
// configuration can hold, a struct at most twice in one chain
// (match.not.not is match.not again).
func wireObjects(steps []wireStep, t reflect.Type, chain []reflect.Type, out []wireObject) []wireObject {
	out = append(out, wireObject{steps: steps, typ: t})
	chain = append(chain, t)
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			child := append(slices.Clip(steps), wireStep{name: name})
			ft := f.Type
			if d, ok := wireDynamic[name]; ok && ft.Kind() != reflect.Struct && ft.Kind() != reflect.Pointer {
				d.steps = append(slices.Clip(steps), d.steps...)
				out = wireObjects(d.steps, d.typ, chain, out)
				continue
			}
			if ft.Kind() == reflect.Slice {
				child = append(child, wireStep{index: true})
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && count(chain, ft) < 2 {
				out = wireObjects(child, ft, chain, out)
			}
		}
	}
	walk(t)
	return out
}

// TestWireFieldsAreKnown parses, for every object of the configuration,
// each member its wire struct encodes: none is an unknown field, and a
// member no wire struct has is one. A field added to a wire struct is
// known, and tested here, without a list to update.
func TestWireFieldsAreKnown(t *testing.T) {
	objects := wireObjects(nil, reflect.TypeFor[wireConfig](), nil, nil)
	if len(objects) < 30 {
		t.Fatalf("walked %d objects, want every one of the configuration", len(objects))
	}
	for _, w := range objects {
		path := w.path()
		// The query conditions take no suffix or contains, which their
		// wire struct shares with the headers conditions (match_more.go).
		query := strings.HasSuffix(path, ".query[0]")
		name := path
		if name == "" {
			name = "document"
		}
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(w.document()))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse(%s) = %v, want field errors", w.document(), err)
			}
			probe := false
			for _, e := range errs {
				if e.Message != "unknown field" {
					continue
				}
				name := strings.TrimPrefix(e.Path, path+".")
				switch {
				case name == unknownProbe:
					probe = true
				case query && (name == "suffix" || name == "contains"):
				default:
					t.Errorf("%s: unknown field, but %s encodes it", e.Path, w.typ.Name())
				}
			}
			if !probe {
				t.Errorf("%s.%s is not reported unknown: %v", path, unknownProbe, errs)
			}
		})
	}
}

// schemaObject is the subschema of the object at steps in schema.json,
// following $ref, items and the one object branch of a oneOf.
func schemaObject(t *testing.T, root map[string]any, steps []wireStep) map[string]any {
	t.Helper()
	resolve := func(n map[string]any) map[string]any {
		for {
			// A $ref beside properties adds rules, not members (2020-12).
			if ref, ok := n["$ref"].(string); ok && n["properties"] == nil {
				n = root["$defs"].(map[string]any)[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
				continue
			}
			for _, k := range []string{"oneOf", "anyOf"} {
				alts, _ := n[k].([]any)
				for _, a := range alts {
					a := a.(map[string]any)
					if _, isObj := a["properties"]; isObj || a["$ref"] != nil {
						n = a
						break
					}
				}
			}
			if _, ok := n["$ref"]; !ok || n["properties"] != nil {
				return n
			}
		}
	}
	n := root
	for _, s := range steps {
		n = resolve(n)
		var next any
		if s.index {
			next = n["items"]
		} else if props, ok := n["properties"].(map[string]any); ok && props[s.name] != nil {
			next = props[s.name]
		} else {
			next = n["additionalProperties"]
		}
		m, ok := next.(map[string]any)
		if !ok {
			t.Fatalf("schema.json has no object at %v", steps)
		}
		n = m
	}
	return resolve(n)
}

// TestSchemaPropertiesAreTheWireFields keeps schema.json, the one other
// place a field is written, to the wire structs: every object of the
// configuration has exactly its wire struct's members.
func TestSchemaPropertiesAreTheWireFields(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(Schema(), &root); err != nil {
		t.Fatal(err)
	}
	for _, w := range wireObjects(nil, reflect.TypeFor[wireConfig](), nil, nil) {
		n := schemaObject(t, root, w.steps)
		props, _ := n["properties"].(map[string]any)
		if props == nil {
			t.Errorf("%s: schema.json has no properties: %v", w.path(), n)
			continue
		}
		names := slices.Sorted(maps.Keys(props))
		fields := slices.Sorted(slices.Values(appendJSONNames(nil, w.typ)))
		if strings.HasSuffix(w.path(), ".query[0]") {
			// See TestWireFieldsAreKnown: no suffix or contains.
			fields = slices.DeleteFunc(fields, func(f string) bool { return f == "suffix" || f == "contains" })
		}
		if !slices.Equal(names, fields) {
			t.Errorf("%s: schema.json has %q, %s has %q", w.path(), names, w.typ.Name(), fields)
		}
	}
}

// TestSchemaEnumsAreTheEnumNames keeps the values schema.json lists for
// each enum field to the names the parser reads and String writes.
func TestSchemaEnumsAreTheEnumNames(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(Schema(), &root); err != nil {
		t.Fatal(err)
	}
	// at is the member path.name..., each name an object member, "[]" the
	// element of the array before it.
	at := func(names ...string) []wireStep {
		var steps []wireStep
		for _, n := range names {
			steps = append(steps, wireStep{name: n, index: n == "[]"})
		}
		return steps
	}
	for _, c := range []struct {
		steps []wireStep
		names string
	}{
		{at("client_ip", "source"), clientIPSourceNames.List()},
		{at("limits", "[]", "algorithm"), algorithmNames.List()},
		{at("limits", "[]", "mode"), modeNames.List()},
		{at("limits", "[]", "failure_policy"), failurePolicyNames.List()},
		{at("limits", "[]", "on_missing_key"), missingKeyActionNames.List()},
		{at("limits", "[]", "on_limit", "action"), limitActionNames.List()},
		{at("breakers", "[]", "per"), breakerScopeNames.List()},
		{at("breakers", "[]", "mode"), breakerModeNames.List()},
		{at("breakers", "[]", "failure_rate", "window_type"), windowTypeNames.List()},
		{at("response", "headers", "[]"), headerFamilyNames.List()},
		{at("response", "body"), bodyNames.List()},
		{at("backend", "protocol"), protocolNames.List()},
		{at("backend", "failure_policy"), failurePolicyNames.List()},
		{at("external", "mode"), modeNames.List()},
		{at("external", "on_missing_key"), missingKeyActionNames.List()},
	} {
		var values []string
		enumValues, _ := schemaObject(t, root, c.steps)["enum"].([]any)
		for _, v := range enumValues {
			values = append(values, v.(string))
		}
		if got := strings.Join(values, ", "); got != c.names {
			t.Errorf("%s: schema.json lists %q, the parser %q", wireObject{steps: c.steps}.path(), got, c.names)
		}
	}
}
