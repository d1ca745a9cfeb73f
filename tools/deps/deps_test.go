// Package deps holds deps.sh, the one list of Debian packages the tests
// need and the step that installs them; this test runs it against fake
// dpkg-query, id and apt-get commands.
package deps

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// allPackages is deps.sh's own list, read from it so the list stays in one
// place; the cases below leave webdis and wrk missing.
var allPackages = func() []string {
	b, err := os.ReadFile("deps.sh")
	if err != nil {
		panic(err)
	}
	m := regexp.MustCompile(`(?m)^packages=\(([^)]*)\)$`).FindSubmatch(b)
	if m == nil {
		panic("deps.sh has no packages=(...) line")
	}
	return strings.Fields(string(m[1]))
}()

// installedButWebdisAndWrk is every package but webdis and wrk.
var installedButWebdisAndWrk = func() []string {
	var out []string
	for _, p := range allPackages {
		if p != "webdis" && p != "wrk" {
			out = append(out, p)
		}
	}
	return out
}()

// fakeSystem is a PATH holding only fake dpkg-query, id and (if withApt)
// apt-get, so the script sees the machine the case describes and nothing
// of the real one.
type fakeSystem struct {
	installed []string
	uid       string
	withApt   bool
}

// run runs deps.sh on the fake system and returns its stderr, its exit
// code and the apt-get calls it made, one line of arguments each.
func (f fakeSystem) run(t *testing.T) (stderr string, code int, aptCalls []string) {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "apt-get.log")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/bash\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// dpkg-query -W -f='${Status}' <package>
	write("dpkg-query", `for p in `+strings.Join(f.installed, " ")+`; do
  if [ "$p" = "$3" ]; then printf 'install ok installed'; exit 0; fi
done
echo "dpkg-query: no packages found matching $3" >&2; exit 1
`)
	write("id", `[ "$1" = -u ] && echo `+f.uid+"\n")
	if f.withApt {
		write("apt-get", `echo "$*" >> `+log+"\n")
	}
	cmd := exec.Command("/bin/bash", "deps.sh")
	cmd.Env = []string{"PATH=" + bin}
	var out strings.Builder
	cmd.Stderr = &out
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(log); err == nil {
		aptCalls = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return out.String(), code, aptCalls
}

func TestAllInstalledDoesNothing(t *testing.T) {
	stderr, code, apt := fakeSystem{installed: allPackages, uid: "0", withApt: true}.run(t)
	if code != 0 || stderr != "" || apt != nil {
		t.Fatalf("exit %d, stderr %q, apt-get calls %q; want a silent success", code, stderr, apt)
	}
}

func TestRootWithAptInstallsWhatIsMissing(t *testing.T) {
	stderr, code, apt := fakeSystem{installed: installedButWebdisAndWrk, uid: "0", withApt: true}.run(t)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{"update -qq", "install -y -qq --no-install-recommends webdis wrk"}
	if strings.Join(apt, "\n") != strings.Join(want, "\n") {
		t.Fatalf("apt-get calls %q, want %q", apt, want)
	}
}

func TestWithoutRootOrAptStopsWithTheCommand(t *testing.T) {
	for _, f := range []fakeSystem{
		{installed: installedButWebdisAndWrk, uid: "1000", withApt: true},
		{installed: installedButWebdisAndWrk, uid: "0", withApt: false},
	} {
		stderr, code, apt := f.run(t)
		if code == 0 || apt != nil {
			t.Errorf("uid %s, apt-get %v: exit %d, apt-get calls %q; want a failure that installs nothing", f.uid, f.withApt, code, apt)
		}
		want := "sudo apt-get update && sudo apt-get install -y --no-install-recommends webdis wrk\n"
		if !strings.Contains(stderr, want) {
			t.Errorf("uid %s, apt-get %v: stderr does not give the command %q:\n%s", f.uid, f.withApt, want, stderr)
		}
	}
	// Without dpkg-query nothing can be known to be installed.
	stderr, code, _ := fakeSystem{uid: "1000"}.run(t)
	if code == 0 || !strings.Contains(stderr, strings.Join(allPackages, " ")) {
		t.Errorf("no dpkg: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestMakeTestRunsDepsFirst: make test stops at deps before building or
// testing anything, and make run does not depend on it.
func TestMakeTestRunsDepsFirst(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	plan := func(target string) []string {
		out, err := exec.Command("make", "-C", "../..", "-n", "--no-print-directory", target).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	if test := plan("test"); !strings.Contains(test[0], "tools/deps/deps.sh") {
		t.Errorf("make test does not start with tools/deps/deps.sh:\n%s", strings.Join(test, "\n"))
	}
	for _, line := range plan("run") {
		if strings.Contains(line, "deps") {
			t.Errorf("make run runs %q; it must need nothing but Go", line)
		}
	}
}
