package importrules

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/proxy-operator/proxy-operator"

// pkg is what `go list -json` says of a package (non-test imports only).
type pkg struct {
	ImportPath string
	Dir        string
	Imports    []string
	Standard   bool
	GoFiles    []string
}

// rule is what a doc.go says its package may not import.
type rule struct {
	forbidden   []string // module-relative paths or external import paths
	onlyStd     bool     // "imports only the standard library"
	noneOfOwn   bool     // "imports nothing of the module"
	allowedOwns []string // "… only the standard library and pkg/x"
}

var (
	mustNot   = regexp.MustCompile(`(?s)must not import (.*?)(?:[.;:](?:\s|$))`)
	onlyStd   = regexp.MustCompile(`(?s)imports only the standard\s+library(?: and ([^.;]*))?`)
	noneOfOwn = regexp.MustCompile(`imports nothing of\s+the module`)
	// A path-like word: a module-relative path or an external import path.
	pathWord = regexp.MustCompile(`(?:^|[\s,(])((?:pkg|apis|cmd|test|hack|artifacts|examples)(?:/[A-Za-z0-9_./-]*)?|[a-z0-9.-]+\.[a-z]{2,}/[A-Za-z0-9_./-]+)(?:[\s,;.)]|$)`)
)

// parseRule reads the package comment of a doc.go.
func parseRule(comment string) rule {
	text := strings.Join(strings.Fields(comment), " ")
	var r rule
	for _, m := range mustNot.FindAllStringSubmatch(text, -1) {
		r.forbidden = append(r.forbidden, pathWords(m[1])...)
	}
	if m := onlyStd.FindStringSubmatch(text); m != nil {
		r.onlyStd = true
		r.allowedOwns = pathWords(m[1])
	}
	r.noneOfOwn = noneOfOwn.MatchString(text)
	return r
}

func pathWords(s string) []string {
	var out []string
	for _, m := range pathWord.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.TrimRight(strings.TrimSuffix(m[1], "/"), "."))
	}
	return out
}

// under reports whether import path imp is name or below it; name is
// module-relative when it does not contain a dot in its first element.
func under(imp, name string) bool {
	if first, _, _ := strings.Cut(name, "/"); !strings.Contains(first, ".") {
		name = module + "/" + name
	}
	return imp == name || strings.HasPrefix(imp, name+"/")
}

// violations lists the imports of p that r forbids; std says whether an
// import path is of the standard library.
func violations(p pkg, r rule, std func(string) bool) []string {
	var out []string
	for _, imp := range p.Imports {
		if imp == "C" || imp == "unsafe" {
			continue
		}
		for _, f := range r.forbidden {
			if under(imp, f) {
				out = append(out, fmt.Sprintf("%s imports %s (its doc.go: must not import %s)", p.ImportPath, imp, f))
			}
		}
		if r.onlyStd && !std(imp) && !slices.ContainsFunc(r.allowedOwns, func(a string) bool { return under(imp, a) }) {
			out = append(out, fmt.Sprintf("%s imports %s (its doc.go: imports only the standard library%s)", p.ImportPath, imp, and(r.allowedOwns)))
		}
		if r.noneOfOwn && under(imp, module) {
			out = append(out, fmt.Sprintf("%s imports %s (its doc.go: imports nothing of the module)", p.ImportPath, imp))
		}
	}
	return out
}

func and(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	return " and " + strings.Join(paths, ", ")
}

// packageComment returns the package comment of dir/doc.go ("" if none).
func packageComment(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "doc.go"))
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var c strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "package ") {
			break
		}
		if rest, ok := strings.CutPrefix(line, "//"); ok && !strings.HasPrefix(rest, " +") && !strings.HasPrefix(rest, "go:") {
			c.WriteString(rest + "\n")
		} else {
			c.Reset() // a comment not attached to the package clause
		}
	}
	return c.String(), sc.Err()
}

func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Dir,Imports,Standard,GoFiles"}, args...)...)
	cmd.Dir = "../.."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// Every rule a doc.go states holds for its package's non-test imports.
func TestDocGoImportRulesHold(t *testing.T) {
	pkgs := goList(t, "./...")
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p.ImportPath] = p.Standard
	}
	isStd := func(imp string) bool { return std[imp] }
	rules := 0
	for _, p := range pkgs {
		comment, err := packageComment(p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		r := parseRule(comment)
		if len(r.forbidden) == 0 && !r.onlyStd && !r.noneOfOwn {
			continue
		}
		rules++
		for _, v := range violations(p, r, isStd) {
			t.Error(v)
		}
	}
	// The rules are found at all: a parser that matched nothing would pass.
	if rules < 20 {
		t.Fatalf("found import rules in %d doc.go files, want at least 20: is the parser broken?", rules)
	}
}

// The parser reads the sentences as the doc.go files write them, and the
// checker catches a package that breaks its rule (negative controls).
func TestRulesAreParsedAndCaught(t *testing.T) {
	std := func(imp string) bool { return !strings.Contains(strings.Split(imp, "/")[0], ".") }
	cases := []struct {
		name    string
		comment string
		imports []string
		want    int
	}{
		{"forbidden module path", "It must not import pkg/lease, pkg/flowcontrol or cmd.", []string{module + "/pkg/flowcontrol/flowcontrolmetrics"}, 1},
		{"allowed neighbour", "It must not import pkg/lease, pkg/flowcontrol or cmd.", []string{module + "/pkg/leasing", module + "/pkg/leaseid"}, 0},
		{"forbidden external", "It must not import pkg/leasing or sigs.k8s.io/controller-runtime.", []string{"sigs.k8s.io/controller-runtime/pkg/client"}, 1},
		{"wrapped over lines", "This package must not import pkg/discovery,\npkg/apiserver or\npkg/metrics; it imports apis/crawl/v1alpha1.", []string{module + "/pkg/metrics", module + "/apis/crawl/v1alpha1"}, 1},
		{"a tree", "It must not import pkg/ or apis/.", []string{module + "/apis/crawl/v1alpha1"}, 1},
		{"only std", "It imports only the standard library.", []string{"net/http", "k8s.io/utils/clock"}, 1},
		{"only std and one of ours", "It imports only the standard library and pkg/discovery/wire, so", []string{"net/http", module + "/pkg/discovery/wire", module + "/pkg/lease"}, 1},
		{"nothing of the module", "It imports nothing of the module.", []string{"fmt", module + "/pkg/version/x"}, 1},
		{"no rule", "It owns the cache.", []string{module + "/pkg/lease"}, 0},
		{"a word that starts like a path", "It must not import pkg/lease, so that it may be tested alone.", []string{module + "/test/ports"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := violations(pkg{ImportPath: "x", Imports: tc.imports}, parseRule(tc.comment), std)
			if len(got) != tc.want {
				t.Fatalf("violations %q, want %d", got, tc.want)
			}
		})
	}
}
