package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.Version != "dev" || i.GoVersion != runtime.Version() || i.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("unstamped build: %+v", i)
	}
	stamped := Info{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.26.8", Platform: "linux/arm64"}
	if got, want := stamped.String(), "proxy-operator v1.2.3 (revision abc123, go1.26.8, linux/arm64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if s := (Info{Version: "dev"}).String(); !strings.Contains(s, "revision unknown") {
		t.Errorf("without a revision: %q", s)
	}
}
