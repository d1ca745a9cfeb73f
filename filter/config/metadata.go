package config

import (
	"fmt"
	"strings"
)

// MetadataMatch is a condition on one value of the request's dynamic
// metadata: namespace Namespace, dotted path Path.
type MetadataMatch struct {
	Namespace, Path string
	// Property is the proxy-wasm property path of the value, built once
	// here so that reading it allocates nothing per request.
	Property []string
	// ValueCondition compares exactly (Op is OpExact) with the value as a
	// key renders it.
	ValueCondition
}

// MetadataProperty is the proxy-wasm property path of a dynamic metadata
// value: Envoy serves filter_metadata under the "metadata" attribute,
// one segment for the namespace (which may itself hold dots) and one per
// element of the dotted path.
func MetadataProperty(namespace, path string) []string {
	prop := []string{"metadata", "filter_metadata", namespace}
	return append(prop, strings.Split(path, ".")...)
}

// parseMetadataKey parses "metadata:<namespace>:<dotted.path>".
func parseMetadataKey(s string) (part KeyPart, err string, ok bool) {
	rest, found := strings.CutPrefix(s, "metadata:")
	if !found {
		return KeyPart{}, "", false
	}
	ns, path, _ := strings.Cut(rest, ":")
	if e := metadataNameError(ns, path); e != "" {
		return KeyPart{}, fmt.Sprintf("invalid metadata key %s: %s", Quote(s), e), true
	}
	return KeyPart{Kind: KeyMetadata, Name: ns, MetaPath: path, Property: MetadataProperty(ns, path)}, "", true
}

// metadataNameError says what is wrong with a namespace and dotted path,
// or "" when both are usable: neither empty, no empty path element.
func metadataNameError(ns, path string) string {
	switch {
	case ns == "":
		return "want metadata:<namespace>:<dotted.path> with a namespace"
	case path == "":
		return "want metadata:<namespace>:<dotted.path> with a path"
	case strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || strings.Contains(path, ".."):
		return "the path has an empty element"
	case strings.ContainsAny(ns+path, "\x00:"):
		return "names must not contain NUL or ':'"
	}
	return ""
}

var metadataMatchFields = fieldsOf[wireMetadataMatch]()

// matchMetadata parses the metadata conditions of a match.
func (p *parser) matchMetadata(o *object, m *Match) {
	p.objects(o, "metadata", metadataMatchFields, func(e *object) {
		var mm MetadataMatch
		for _, f := range []string{"namespace", "path"} {
			if !e.has(f) {
				e.errorf(f, "required")
			}
		}
		mm.Namespace, _ = e.str("namespace")
		mm.Path, _ = e.str("path")
		if e.has("namespace") && e.has("path") {
			if msg := metadataNameError(mm.Namespace, mm.Path); msg != "" {
				e.errorf("path", "invalid metadata namespace or path: %s", msg)
			}
		}
		switch {
		case e.has("value") && e.has("present"):
			e.errorf("present", "cannot be combined with value")
		case e.has("value"):
			mm.Value, mm.HasValue = e.str("value")
		case e.has("present"):
			mm.Present, _ = e.boolean("present")
		default:
			p.errorf(e.path, e.at, "one of value or present is required")
		}
		mm.Property = MetadataProperty(mm.Namespace, mm.Path)
		m.Metadata = append(m.Metadata, mm)
	})
}
