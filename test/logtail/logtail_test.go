package logtail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{name: "fewer lines than asked", in: "a\nb\n", n: 5, want: "a\nb"},
		{name: "the last n", in: "a\nb\nc\nd\n", n: 2, want: "c\nd"},
		{name: "no trailing newline", in: "a\nb\nc", n: 1, want: "c"},
		{name: "zero", in: "a\nb", n: 0, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Lines(tc.in, tc.n)); diff != "" {
				t.Errorf("Lines(%q, %d) (-want +got):\n%s", tc.in, tc.n, diff)
			}
		})
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.log")
	// Longer than the window: the tail still ends with the file's last line.
	var b strings.Builder
	for i := 0; b.Len() < 3*fileWindow; i++ {
		b.WriteString(strings.Repeat("x", 99) + "\n")
	}
	b.WriteString("second to last\nlast\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("second to last\nlast", File(path, 2)); diff != "" {
		t.Errorf("File (-want +got):\n%s", diff)
	}
	if got := File(filepath.Join(dir, "absent.log"), 2); !strings.HasPrefix(got, "(no log: ") {
		t.Errorf("File of an absent file = %q, want it to say there is no log", got)
	}
}
