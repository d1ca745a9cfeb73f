package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"gopkg.in/yaml.v3"
)

// parseYAML parses one YAML document and returns a tree with aliases and
// merge keys expanded, so that every later pass sees plain maps, lists and
// scalars whose line numbers still point into the user's file.
func parseYAML(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			return nil, fmt.Errorf("envoy config: empty YAML document")
		}
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	// Envoy rejects multi-document bootstrap files; so do we, rather than
	// quietly reading only the first document.
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("envoy config: line %d: more than one YAML document", extra.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("envoy config: empty YAML document")
	}
	budget := maxYAMLNodes
	root, err := expandYAML(doc.Content[0], 0, &budget)
	if err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("envoy config: line %d: the bootstrap must be a YAML mapping", root.Line)
	}
	return root, nil
}

// maxYAMLDepth and maxYAMLNodes bound alias expansion, which could
// otherwise blow up exponentially ("billion laughs"); real bootstraps are
// orders of magnitude below both.
const (
	maxYAMLDepth = 100
	maxYAMLNodes = 1 << 20
)

func expandYAML(n *yaml.Node, depth int, budget *int) (*yaml.Node, error) {
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("envoy config: line %d: YAML nested too deeply", n.Line)
	}
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("envoy config: line %d: YAML expands to more than %d nodes", n.Line, maxYAMLNodes)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("envoy config: line %d: unknown YAML alias", n.Line)
		}
		return expandYAML(n.Alias, depth+1, budget)
	case yaml.ScalarNode:
		return n, nil
	case yaml.SequenceNode:
		out := *n
		out.Content = make([]*yaml.Node, 0, len(n.Content))
		for _, c := range n.Content {
			e, err := expandYAML(c, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out.Content = append(out.Content, e)
		}
		return &out, nil
	case yaml.MappingNode:
		out := *n
		out.Content = nil
		seen := map[string]int{}
		put := func(k, v *yaml.Node, override bool) error {
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("envoy config: line %d: mapping keys must be scalars", k.Line)
			}
			if i, ok := seen[k.Value]; ok {
				if !override {
					return nil
				}
				out.Content[i+1] = v
				return nil
			}
			seen[k.Value] = len(out.Content)
			out.Content = append(out.Content, k, v)
			return nil
		}
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				merges = append(merges, v)
				continue
			}
			if _, dup := seen[k.Value]; dup && k.Kind == yaml.ScalarNode {
				return nil, fmt.Errorf("envoy config: line %d: duplicate key %q", k.Line, k.Value)
			}
			ev, err := expandYAML(v, depth+1, budget)
			if err != nil {
				return nil, err
			}
			if err := put(k, ev, true); err != nil {
				return nil, err
			}
		}
		// Explicit keys win over merged ones, as YAML's merge key spec says.
		for _, m := range merges {
			em, err := expandYAML(m, depth+1, budget)
			if err != nil {
				return nil, err
			}
			srcs := []*yaml.Node{em}
			if em.Kind == yaml.SequenceNode {
				srcs = em.Content
			}
			for _, src := range srcs {
				if src.Kind != yaml.MappingNode {
					return nil, fmt.Errorf("envoy config: line %d: merge key needs a mapping", src.Line)
				}
				for j := 0; j+1 < len(src.Content); j += 2 {
					if err := put(src.Content[j], src.Content[j+1], false); err != nil {
						return nil, err
					}
				}
			}
		}
		return &out, nil
	default:
		return nil, fmt.Errorf("envoy config: line %d: unexpected YAML node", n.Line)
	}
}

// yamlToJSON renders the expanded tree as JSON for protojson. Scalars keep
// the type YAML resolved for them, as Envoy's own YAML-to-JSON step does.
func yamlToJSON(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, n); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, n.Content[i].Value)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return writeScalarJSON(buf, n)
	default:
		return fmt.Errorf("envoy config: line %d: unexpected YAML node", n.Line)
	}
	return nil
}

func writeScalarJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("envoy config: line %d: %v", n.Line, err)
		}
		buf.WriteString(strconv.FormatBool(b))
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			buf.WriteString(strconv.FormatInt(i, 10))
			return nil
		}
		var u uint64
		if err := n.Decode(&u); err != nil {
			return fmt.Errorf("envoy config: line %d: integer %q out of range", n.Line, n.Value)
		}
		buf.WriteString(strconv.FormatUint(u, 10))
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return fmt.Errorf("envoy config: line %d: %v", n.Line, err)
		}
		switch {
		case math.IsNaN(f):
			buf.WriteString(`"NaN"`)
		case math.IsInf(f, 1):
			buf.WriteString(`"Infinity"`)
		case math.IsInf(f, -1):
			buf.WriteString(`"-Infinity"`)
		default:
			buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		}
	default:
		writeJSONString(buf, n.Value)
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a Go string always marshals
	buf.Write(b)
}

// fieldError is a config error tied to a place in the YAML file.
type fieldError struct {
	Path string
	Line int
	Msg  string
}

func (e *fieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("envoy config: %s (line %d): %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("envoy config: %s: %s", e.Path, e.Msg)
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// checkYAML walks the YAML tree alongside the proto descriptors. It exists
// so that unknown and unsupported fields are reported with the path and line
// the user wrote, which protojson's errors (offsets into generated JSON)
// cannot give.
func checkYAML(n *yaml.Node, md protoreflect.MessageDescriptor, path string) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	switch md.FullName() {
	case "google.protobuf.Any":
		return checkAnyYAML(n, path)
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue":
		// Free-form JSON; protojson checks it.
		return nil
	}
	if isScalarWKT(md.FullName()) {
		if n.Kind != yaml.ScalarNode {
			return &fieldError{path, n.Line, fmt.Sprintf("expected a scalar for %s", md.FullName())}
		}
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return &fieldError{path, n.Line, fmt.Sprintf("expected a mapping for %s", md.FullName())}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := checkFieldYAML(k, v, md, path); err != nil {
			return err
		}
	}
	return nil
}

func checkFieldYAML(k, v *yaml.Node, md protoreflect.MessageDescriptor, path string) error {
	name := k.Value
	fpath := joinPath(path, name)
	fd := md.Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		fd = md.Fields().ByJSONName(name)
	}
	if fd == nil {
		return &fieldError{fpath, k.Line, fmt.Sprintf("unknown field %q in %s", name, md.FullName())}
	}
	if !fieldSupported(md.FullName(), fd.Name()) {
		return &fieldError{fpath, k.Line, fmt.Sprintf("field %s.%s is not supported by sluice-envoy", md.FullName(), fd.Name())}
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil
	}
	switch {
	case fd.IsMap():
		if v.Kind != yaml.MappingNode {
			return &fieldError{fpath, v.Line, "expected a mapping"}
		}
		if fd.MapValue().Kind() == protoreflect.MessageKind {
			for j := 0; j+1 < len(v.Content); j += 2 {
				if err := checkYAML(v.Content[j+1], fd.MapValue().Message(), joinPath(fpath, v.Content[j].Value)); err != nil {
					return err
				}
			}
		}
		return nil
	case fd.IsList():
		if v.Kind != yaml.SequenceNode {
			return &fieldError{fpath, v.Line, "expected a list"}
		}
		for j, e := range v.Content {
			epath := fmt.Sprintf("%s[%d]", fpath, j)
			if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
				if err := checkYAML(e, fd.Message(), epath); err != nil {
					return err
				}
			} else if e.Kind != yaml.ScalarNode {
				return &fieldError{epath, e.Line, "expected a scalar"}
			} else if fd.Kind() == protoreflect.EnumKind {
				if err := checkEnumYAML(e, fd.Enum(), epath); err != nil {
					return err
				}
			}
		}
		return nil
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		return checkYAML(v, fd.Message(), fpath)
	default:
		if v.Kind != yaml.ScalarNode {
			return &fieldError{fpath, v.Line, "expected a scalar"}
		}
		if fd.Kind() == protoreflect.EnumKind {
			return checkEnumYAML(v, fd.Enum(), fpath)
		}
		return nil
	}
}

// checkEnumYAML accepts enum names in any case and rewrites them to the
// canonical spelling, because Envoy parses with case-insensitive enums
// (configs in the wild say "codec_type: auto") while protojson does not.
func checkEnumYAML(v *yaml.Node, ed protoreflect.EnumDescriptor, path string) error {
	if v.ShortTag() != "!!str" {
		return nil // numbers are checked by protojson
	}
	vals := ed.Values()
	if vals.ByName(protoreflect.Name(v.Value)) != nil {
		return nil
	}
	var names []string
	for i := 0; i < vals.Len(); i++ {
		name := string(vals.Get(i).Name())
		if strings.EqualFold(name, v.Value) {
			v.Value = name
			return nil
		}
		names = append(names, name)
	}
	return &fieldError{path, v.Line, fmt.Sprintf("invalid value %q for enum %s (valid: %s)", v.Value, ed.FullName(), strings.Join(names, ", "))}
}

func checkAnyYAML(n *yaml.Node, path string) error {
	if n.Kind != yaml.MappingNode {
		return &fieldError{path, n.Line, "expected a mapping with \"@type\""}
	}
	var typeURL string
	var typeLine int
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "@type" {
			typeURL = n.Content[i+1].Value
			typeLine = n.Content[i+1].Line
		}
	}
	if typeURL == "" {
		return &fieldError{path, n.Line, "typed_config/Any needs an \"@type\""}
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(typeURL)
	if err != nil {
		return &fieldError{joinPath(path, "@type"), typeLine, fmt.Sprintf("type %q is not supported by sluice-envoy", typeURL)}
	}
	md := mt.Descriptor()
	if !anyTypeSupported(md.FullName()) {
		return &fieldError{joinPath(path, "@type"), typeLine, fmt.Sprintf("type %q is not supported by sluice-envoy", typeURL)}
	}
	if isScalarWKT(md.FullName()) || md.FullName() == "google.protobuf.Struct" {
		// In JSON such Anys carry their payload under "value".
		for i := 0; i+1 < len(n.Content); i += 2 {
			switch key := n.Content[i].Value; key {
			case "@type":
			case "value":
				if isScalarWKT(md.FullName()) && n.Content[i+1].Kind != yaml.ScalarNode {
					return &fieldError{joinPath(path, "value"), n.Content[i+1].Line, "expected a scalar"}
				}
			default:
				return &fieldError{joinPath(path, key), n.Content[i].Line, fmt.Sprintf("unknown field %q in %s", key, md.FullName())}
			}
		}
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "@type" {
			continue
		}
		if err := checkFieldYAML(n.Content[i], n.Content[i+1], md, path); err != nil {
			return err
		}
	}
	return nil
}

func isScalarWKT(name protoreflect.FullName) bool {
	switch name {
	case "google.protobuf.Duration", "google.protobuf.Timestamp", "google.protobuf.FieldMask",
		"google.protobuf.StringValue", "google.protobuf.BytesValue", "google.protobuf.BoolValue",
		"google.protobuf.Int32Value", "google.protobuf.Int64Value", "google.protobuf.UInt32Value",
		"google.protobuf.UInt64Value", "google.protobuf.FloatValue", "google.protobuf.DoubleValue":
		return true
	}
	return false
}
