// Command mdblock reads or replaces a named block of a markdown file: the
// lines between "<!-- NAME:begin -->" and "<!-- NAME:end -->". BENCHMARKS.md
// keeps the soak results in such a block, because the soak takes longer
// than `make bench` may: `make soak` replaces the block, and `make bench`
// carries it over into the report it rewrites.
//
//	go run ./tools/mdblock -name soak -get BENCHMARKS.md > block.md
//	go run ./tools/mdblock -name soak -set block.md BENCHMARKS.md
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	name := flag.String("name", "", "block name")
	get := flag.Bool("get", false, "print the block's content")
	set := flag.String("set", "", "replace the block's content with this file's")
	flag.Parse()
	if *name == "" || flag.NArg() != 1 || *get == (*set != "") {
		fmt.Fprintln(os.Stderr, "usage: mdblock -name NAME (-get | -set CONTENT) FILE")
		os.Exit(2)
	}
	if err := run(*name, *get, *set, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "mdblock:", err)
		os.Exit(1)
	}
}

func run(name string, get bool, set, path string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if get {
		b, err := Get(doc, name)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	content, err := os.ReadFile(set)
	if err != nil {
		return err
	}
	out, err := Set(doc, name, content)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// bounds finds the block: the offsets just after the begin marker's line
// and at the start of the end marker's line.
func bounds(doc []byte, name string) (int, int, error) {
	begin := []byte("<!-- " + name + ":begin -->\n")
	end := []byte("<!-- " + name + ":end -->")
	i := lineIndex(doc, begin)
	if i < 0 {
		return 0, 0, fmt.Errorf("no line %q", bytes.TrimSpace(begin))
	}
	start := i + len(begin)
	j := lineIndex(doc[start:], end)
	if j < 0 {
		return 0, 0, fmt.Errorf("no line %q after the begin marker", end)
	}
	if lineIndex(doc[start+j+len(end):], begin) >= 0 {
		return 0, 0, errors.New("the block appears twice")
	}
	return start, start + j, nil
}

// lineIndex is the offset of the first occurrence of s at a line start.
func lineIndex(doc, s []byte) int {
	for off := 0; off <= len(doc); {
		i := bytes.Index(doc[off:], s)
		if i < 0 {
			return -1
		}
		if at := off + i; at == 0 || doc[at-1] == '\n' {
			return at
		}
		off += i + 1
	}
	return -1
}

// Get returns the block's content.
func Get(doc []byte, name string) ([]byte, error) {
	s, e, err := bounds(doc, name)
	if err != nil {
		return nil, err
	}
	return doc[s:e], nil
}

// Set returns doc with the block's content replaced; content gets a final
// newline if it lacks one, so the end marker stays on its own line.
func Set(doc []byte, name string, content []byte) ([]byte, error) {
	s, e, err := bounds(doc, name)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), doc[:s]...)
	out = append(out, content...)
	if len(content) > 0 && content[len(content)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, doc[e:]...), nil
}
