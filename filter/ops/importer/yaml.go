package importer

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// node is a YAML node with its path in the document ("descriptors[0].key"),
// so that every finding and error names where it comes from.
type node struct {
	n    *yaml.Node
	path string
	// parentLine is, for a missing child, its mapping's line, so that
	// "must not be empty" still says where.
	parentLine int
}

// child is the value of key in a mapping, or a node without a value that
// still has the key's path.
func (n node) child(key string) node {
	if n.n == nil || n.n.Kind != yaml.MappingNode {
		return node{path: join(n.path, key), parentLine: n.line()}
	}
	for i := 0; i+1 < len(n.n.Content); i += 2 {
		if n.n.Content[i].Value == key {
			return node{n: deref(n.n.Content[i+1]), path: join(n.path, key)}
		}
	}
	return node{path: join(n.path, key), parentLine: n.line()}
}

// duplicateKeys reports every key given twice in one mapping under n:
// yaml.v3 keeps both and the importer would read the first, while the
// service (yaml.v2) takes the last and Envoy refuses the file. Aliases
// are checked where their anchor is.
func duplicateKeys(r reader, n node) {
	switch n.n.Kind {
	case yaml.MappingNode:
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.n.Content); i += 2 {
			k, v := n.n.Content[i], n.n.Content[i+1]
			c := node{n: v, path: join(n.path, k.Value)}
			if seen[k.Value] {
				r.fail(node{n: k, path: c.path}, "key %q is given twice in this mapping", k.Value)
			}
			seen[k.Value] = true
			duplicateKeys(r, c)
		}
	case yaml.SequenceNode:
		for i, c := range n.n.Content {
			duplicateKeys(r, node{n: c, path: fmt.Sprintf("%s[%d]", n.path, i)})
		}
	}
}

// deref resolves an alias (*anchor) to the node it names: Envoy configs
// share blocks that way. Chains are bounded by the document's size,
// which read checked.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

// keys are a mapping's keys in document order.
func (n node) keys() []string {
	if n.n == nil || n.n.Kind != yaml.MappingNode {
		return nil
	}
	var ks []string
	for i := 0; i+1 < len(n.n.Content); i += 2 {
		ks = append(ks, n.n.Content[i].Value)
	}
	return ks
}

func (n node) present() bool {
	return n.n != nil && !(n.n.Kind == yaml.ScalarNode && n.n.Tag == "!!null")
}

// items are a sequence's elements; a missing node has none.
func (n node) items() []node {
	if n.n == nil || n.n.Kind != yaml.SequenceNode {
		return nil
	}
	out := make([]node, len(n.n.Content))
	for i, c := range n.n.Content {
		out[i] = node{n: deref(c), path: fmt.Sprintf("%s[%d]", n.path, i)}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// line is the node's line for messages, 0 when unknown.
func (n node) line() int {
	if n.n == nil {
		return n.parentLine
	}
	return n.n.Line
}

// reader reads typed scalars, recording a type error at the node's path
// and returning the zero value, so that every error is reported at once.
type reader struct {
	file string
	errs *[]Finding
	// lenient reads any scalar as a string, as the service's yaml.v2
	// does; Envoy's protobuf JSON refuses a number or a bool for a
	// string field.
	lenient bool
}

func (r reader) fail(n node, format string, args ...any) {
	*r.errs = append(*r.errs, Finding{File: r.file, Line: n.line(), Path: n.path, Message: fmt.Sprintf(format, args...)})
}

func (r reader) isSeq(n node) bool {
	if !n.present() {
		return false
	}
	if n.n.Kind != yaml.SequenceNode {
		r.fail(n, "must be a list")
		return false
	}
	return true
}

func (r reader) isMap(n node) bool {
	if !n.present() {
		return false
	}
	if n.n.Kind != yaml.MappingNode {
		r.fail(n, "must be a mapping")
		return false
	}
	return true
}

func (r reader) str(n node) string {
	if !n.present() {
		return ""
	}
	if n.n.Kind != yaml.ScalarNode || !r.lenient && n.n.Tag != "!!str" {
		r.fail(n, "must be a string")
		return ""
	}
	return n.n.Value
}

func (r reader) boolean(n node) bool {
	if !n.present() {
		return false
	}
	if n.n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.n.Value) {
		case "true":
			return true
		case "false":
			return false
		}
	}
	r.fail(n, "must be true or false")
	return false
}

// wrappedBool reads a bool or a google.protobuf.BoolValue ({value: b}),
// def when absent.
func (r reader) wrappedBool(n node, def bool) bool {
	if !n.present() {
		return def
	}
	if n.n.Kind == yaml.MappingNode {
		return r.boolean(n.child("value"))
	}
	return r.boolean(n)
}

// uint reads a whole number from 0 to max; protobuf JSON also spells
// integers as strings.
func (r reader) uint(n node, max uint64) (uint64, bool) {
	if !n.present() {
		return 0, false
	}
	if n.n.Kind == yaml.ScalarNode {
		if v, err := strconv.ParseUint(n.n.Value, 10, 64); err == nil && v <= max {
			return v, true
		}
	}
	r.fail(n, "must be a whole number from 0 to %d", max)
	return 0, false
}

// wrappedUint reads a number or a UInt32Value ({value: n}).
func (r reader) wrappedUint(n node, max uint64) (uint64, bool) {
	if n.present() && n.n.Kind == yaml.MappingNode {
		return r.uint(n.child("value"), max)
	}
	return r.uint(n, max)
}
