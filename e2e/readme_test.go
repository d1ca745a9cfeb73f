package e2e_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeDeployYAMLIsShipped keeps every YAML snippet in README.md's
// "Deploy" section an excerpt of a file under envoy/, which the config
// tests validate; a snippet edited in the README alone would be untested
// advice. SLUICE_README points the test at another file (a draft section).
func TestReadmeDeployYAMLIsShipped(t *testing.T) {
	readme := os.Getenv("SLUICE_README")
	if readme == "" {
		readme = filepath.Join("..", "README.md")
	}
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	section, ok := markdownSection(string(text), "Deploy")
	if !ok {
		t.Skipf("%s has no Deploy section yet", readme)
	}
	snippets := fencedBlocks(section, "yaml", "yml")
	if len(snippets) == 0 {
		t.Fatalf("%s: the Deploy section shows no YAML; nothing to check", readme)
	}
	shipped := shippedEnvoyFiles(t)
	for i, snip := range snippets {
		found := false
		for _, content := range shipped {
			if containsExcerpt(content, snip) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: Deploy YAML block %d is not an excerpt of any file under envoy/ (copy it from there, or change the file and let the config tests check it):\n%s", readme, i+1, snip)
		}
	}
}

// shippedEnvoyFiles maps every YAML file under envoy/ to its content.
func shippedEnvoyFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(filepath.Join("..", "envoy"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[path] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no YAML files under envoy/")
	}
	return files
}

// markdownSection returns the body of the first "## <title>…" heading, up
// to the next heading of level one or two.
func markdownSection(doc, title string) (string, bool) {
	var out strings.Builder
	in, found, fence := false, false, false
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && (strings.HasPrefix(line, "# ") || strings.HasPrefix(line, "## ")) {
			if in {
				break
			}
			if strings.HasPrefix(line, "## ") && strings.HasPrefix(strings.TrimSpace(line[3:]), title) {
				in, found = true, true
				continue
			}
		}
		if in {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String(), found
}

// fencedBlocks returns the contents of the ``` blocks tagged with one of
// langs.
func fencedBlocks(doc string, langs ...string) []string {
	var blocks []string
	var cur []string
	in, want := false, false
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		if !in && strings.HasPrefix(trimmed, "```") {
			in = true
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			want = false
			for _, l := range langs {
				if lang == l {
					want = true
				}
			}
			cur = nil
			continue
		}
		if in && trimmed == "```" {
			if want {
				blocks = append(blocks, strings.Join(cur, "\n"))
			}
			in = false
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	return blocks
}

// containsExcerpt reports whether snippet's lines appear, consecutively and
// unchanged, in content, allowing only one indentation prefix added to every
// non-blank line (so a nested block can be shown flush left).
func containsExcerpt(content, snippet string) bool {
	snip := trimBlankEnds(strings.Split(snippet, "\n"))
	if len(snip) == 0 {
		return false
	}
	lines := strings.Split(content, "\n")
	for i := range lines {
		if i+len(snip) > len(lines) {
			break
		}
		first := strings.TrimRight(lines[i], " \t\r")
		if !strings.HasSuffix(first, snip[0]) {
			continue
		}
		prefix := first[:len(first)-len(snip[0])]
		if strings.TrimLeft(prefix, " ") != "" {
			continue
		}
		ok := true
		for j, s := range snip {
			l := strings.TrimRight(lines[i+j], " \t\r")
			if s == "" {
				ok = l == ""
			} else {
				ok = l == prefix+s
			}
			if !ok {
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func trimBlankEnds(lines []string) []string {
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " \t\r")
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func TestContainsExcerpt(t *testing.T) {
	const file = "a:\n  b:\n    c: 1\n\n    d: 2\n  e: 3\n"
	tests := []struct {
		snippet string
		want    bool
	}{
		{"a:\n  b:", true},
		{"b:\n  c: 1", true},                 // shifted left by the same two spaces
		{"\nc: 1\n\nd: 2\n", true},           // blank lines at the ends ignored, inside kept
		{"c: 1\nd: 2", false},                // the blank line between them is missing
		{"b:\n c: 1", false},                 // indentation changed inside the excerpt
		{"b:\n  c: 2", false},                // value changed
		{"e: 3\nf: 4", false},                // runs past the file
		{"x: 1", false},                      // not there at all
		{"", false},                          // nothing is not an excerpt
		{"  b:\n    c: 1\n\n    d: 2", true}, // as indented in the file
	}
	for _, tc := range tests {
		if got := containsExcerpt(file, tc.snippet); got != tc.want {
			t.Errorf("containsExcerpt(%q) = %v, want %v", tc.snippet, got, tc.want)
		}
	}
}

func TestMarkdownSectionAndBlocks(t *testing.T) {
	doc := "# Title\n## Install\n```yaml\nno: 1\n```\n## Deploy on Envoy\ntext\n```yaml\na: 1\n```\n### Sub\n```sh\nmake\n```\n```yml\n# ## not a heading\nb: 2\n```\n## Next\n```yaml\nc: 3\n```\n"
	sec, ok := markdownSection(doc, "Deploy")
	if !ok {
		t.Fatal("Deploy section not found")
	}
	got := fencedBlocks(sec, "yaml", "yml")
	want := []string{"a: 1", "# ## not a heading\nb: 2"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("blocks = %q, want %q", got, want)
	}
	if _, ok := markdownSection("# T\n## Other\n", "Deploy"); ok {
		t.Error("found a Deploy section that is not there")
	}
}
