// Package yamlbound bounds what YAML costs to read before it is read:
// sluicectl's check and import take files an operator names, possibly
// hostile, and yaml.v3 builds its whole node tree, and expands aliases
// when decoding, without a bound on either's size.
package yamlbound

import "gopkg.in/yaml.v3"

// Starts counts the places in data where a YAML node can start: lines,
// and the indicators -, ?, :, ',', [, { and * (wherever they are, also
// in quoted text and comments, which only over-counts). A node needs one
// of them (a new scalar needs a new line or an indicator before it), and
// one of them starts at most three nodes (a block mapping, its key and
// an empty value), so three times the count bounds the tree yaml.v3
// would build, at the cost of one pass over the bytes.
func Starts(data []byte) int {
	n := 1
	for _, c := range data {
		switch c {
		case '\n', '\r', '-', '?', ':', ',', '[', '{', '*':
			n++
		}
	}
	return n
}

// Step is one step down the tree to where a bound was passed: the
// child Index of Parent.
type Step struct {
	Parent *yaml.Node
	Index  int
}

// Charge takes the size of n with every alias expanded from *left, as
// the bytes of its scalars and two more per node (what JSON takes for
// it, but for escapes): one 1 MiB string named 2,000 times is a few
// nodes and 2 GB once decoded. It stops where *left runs out or nesting
// passes maxDepth, and then returns false with the steps from n to that
// node, innermost first, so the caller can name the place; the walk
// costs at most what *left allows. A budget shared by several calls
// bounds them all together.
func Charge(n *yaml.Node, left *int, maxDepth int) ([]Step, bool) {
	return charge(n, left, 0, maxDepth)
}

func charge(n *yaml.Node, left *int, depth, maxDepth int) ([]Step, bool) {
	if n == nil {
		return nil, true
	}
	if depth > maxDepth {
		return nil, false
	}
	if *left -= len(n.Value) + 2; *left < 0 {
		return nil, false
	}
	if n.Kind == yaml.AliasNode {
		return charge(n.Alias, left, depth+1, maxDepth)
	}
	for i, c := range n.Content {
		if trail, ok := charge(c, left, depth+1, maxDepth); !ok {
			return append(trail, Step{Parent: n, Index: i}), false
		}
	}
	return nil, true
}
