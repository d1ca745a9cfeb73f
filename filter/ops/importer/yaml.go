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
}

// child is the value of key in a mapping, or a zero node.
func (n node) child(key string) node {
	if n.n == nil || n.n.Kind != yaml.MappingNode {
		return node{}
	}
	for i := 0; i+1 < len(n.n.Content); i += 2 {
		if n.n.Content[i].Value == key {
			return node{deref(n.n.Content[i+1]), join(n.path, key)}
		}
	}
	return node{}
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
		out[i] = node{deref(c), fmt.Sprintf("%s[%d]", n.path, i)}
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
		return 0
	}
	return n.n.Line
}

// reader reads typed scalars, recording a type error at the node's path
// and returning the zero value, so that every error is reported at once.
type reader struct {
	file string
	errs *[]Finding
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
	if n.n.Kind != yaml.ScalarNode {
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
