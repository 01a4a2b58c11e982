package logtail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// fileWindow bounds what File reads: a long run's log can be hundreds of
// megabytes, and a failure message wants its end.
const fileWindow = 64 << 10

// Lines returns up to the last n lines of s, without a trailing newline.
func Lines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// File returns up to the last n lines of the file at path (of its last
// 64 KiB), or a parenthesised sentence saying why there is none.
func File(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-fileWindow, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(reading log: %v)", err)
	}
	return Lines(string(buf), n)
}
