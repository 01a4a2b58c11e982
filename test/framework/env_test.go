package framework

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tests stands in for a *testing.M: it records that it ran and returns code.
type tests struct {
	code int
	ran  *[]string
}

func (t tests) Run() int {
	*t.ran = append(*t.ran, "tests")
	return t.code
}

func TestEnvMain(t *testing.T) {
	t.Setenv(KeepLogsEnv, "")
	for _, tc := range []struct {
		name      string
		testsCode int
		setupErr  error
		stopErr   error
		wantCode  int
		wantOrder []string
		// wantOut are substrings of what Main prints; the log's tail is
		// printed, and the directory kept, only on a failure.
		wantOut  []string
		wantKept bool
	}{
		{
			name:      "passes: parts stop in reverse, logs go",
			wantOrder: []string{"start control plane", "start operator", "tests", "stop operator", "stop control plane"},
		},
		{
			name: "a test fails: the log's tail is shown and kept", testsCode: 1, wantCode: 1,
			wantOrder: []string{"start control plane", "start operator", "tests", "stop operator", "stop control plane"},
			wantOut:   []string{"--- last lines of ", "operator.log ---\nline 2\nline 3", "logs kept in "}, wantKept: true,
		},
		{
			name: "setup fails: no tests, what started stops", setupErr: errors.New("no squid"), wantCode: 1,
			wantOrder: []string{"start control plane", "start operator", "stop operator", "stop control plane"},
			wantOut:   []string{"pkg: starting the environment: no squid", "line 3"}, wantKept: true,
		},
		{
			name: "a part fails to stop: the package fails", stopErr: errors.New("did not stop within 60s"), wantCode: 1,
			wantOrder: []string{"start control plane", "start operator", "tests", "stop operator", "stop control plane"},
			wantOut:   []string{"pkg: stopping the environment: operator: did not stop within 60s"}, wantKept: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var order []string
			var dir string
			var out bytes.Buffer
			code := run(tests{code: tc.testsCode, ran: &order}, "pkg", func(_ context.Context, e *Env) error {
				dir = e.LogDir
				order = append(order, "start control plane")
				e.Defer("control plane", func() error { order = append(order, "stop control plane"); return nil })
				order = append(order, "start operator")
				e.Defer("operator", func() error { order = append(order, "stop operator"); return tc.stopErr })
				if err := os.WriteFile(filepath.Join(e.LogDir, "operator.log"), []byte("line 1\nline 2\nline 3\n"), 0o644); err != nil {
					return err
				}
				e.ShowLog("operator.log", 2)
				return tc.setupErr
			}, &out)
			if code != tc.wantCode {
				t.Errorf("code = %d, want %d (output:\n%s)", code, tc.wantCode, out.String())
			}
			if diff := cmp.Diff(tc.wantOrder, order); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if tc.wantCode == 0 && out.Len() != 0 {
				t.Errorf("a passing package printed:\n%s", out.String())
			}
			_, err := os.Stat(dir)
			if kept := err == nil; kept != tc.wantKept {
				t.Errorf("log directory kept: %v, want %v", kept, tc.wantKept)
			}
			_ = os.RemoveAll(dir)
		})
	}
}

// TestEnvKeepsLogsWhenAsked: KeepLogsEnv keeps a passing package's logs.
func TestEnvKeepsLogsWhenAsked(t *testing.T) {
	t.Setenv(KeepLogsEnv, "1")
	var ran []string
	var dir string
	var out bytes.Buffer
	code := run(tests{ran: &ran}, "pkg", func(_ context.Context, e *Env) error { dir = e.LogDir; return nil }, &out)
	defer os.RemoveAll(dir)
	if code != 0 {
		t.Fatalf("code = %d", code)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("log directory removed with %s set: %v", KeepLogsEnv, err)
	}
	if !strings.Contains(out.String(), "logs kept in "+dir) {
		t.Errorf("output does not name the kept directory: %q", out.String())
	}
}
