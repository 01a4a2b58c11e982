package importrules

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// maxCmdLines bounds the composition root (cmd/…, tests aside): each
// package owns its options and constructors; cmd only composes them. Past
// it, a rule or a type has moved into cmd (#49).
const maxCmdLines = 800

// cmdLines counts the lines of the non-test Go files of the packages.
func cmdLines(t *testing.T, pkgs []pkg) int {
	t.Helper()
	n := 0
	for _, p := range pkgs {
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			n += bytes.Count(b, []byte("\n"))
		}
	}
	return n
}

func TestCmdIsOnlyACompositionRoot(t *testing.T) {
	n := cmdLines(t, goList(t, "./cmd/..."))
	if n > maxCmdLines {
		t.Errorf("cmd holds %d lines of Go (tests aside), at most %d: move what is not composition into the package that owns it", n, maxCmdLines)
	}
	// The count sees the files at all.
	if n < 100 {
		t.Fatalf("cmd counted %d lines: is the listing broken?", n)
	}
}
