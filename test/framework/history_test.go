package framework

import (
	"testing"
	"time"
)

// The checker must see a proxy given out twice (negative control).
func TestCheckHistoryCatchesADoubleGrant(t *testing.T) {
	t0 := time.Now()
	w := 2 * time.Second
	a := Grant{ID: "a", Proxy: "p", Got: t0, Ended: t0.Add(time.Second)}
	b := Grant{ID: "b", Proxy: "p", Got: t0.Add(500 * time.Millisecond), Ended: t0.Add(2 * time.Second)}
	after := Grant{ID: "c", Proxy: "p", Got: t0.Add(3 * time.Second), Ended: t0.Add(4 * time.Second)}
	if r := CheckHistory([]Grant{a, b, after}, nil, w); r.Planned != 1 || r.Crash != 0 {
		t.Errorf("double grant, no kill: %s", r)
	}
	if r := CheckHistory([]Grant{a, b}, []Kill{{At: t0.Add(100 * time.Millisecond), Signal: "SIGKILL"}}, w); r.Planned != 0 || r.Crash != 1 {
		t.Errorf("double grant across a crash: %s", r)
	}
	if r := CheckHistory([]Grant{a, b}, []Kill{{At: t0.Add(100 * time.Millisecond), Signal: "SIGTERM"}}, w); r.Planned != 1 {
		t.Errorf("double grant across a planned handover must count: %s", r)
	}
	if r := CheckHistory([]Grant{a, b}, []Kill{{At: t0.Add(100 * time.Millisecond), Signal: "SIGKILL"}}, 50*time.Millisecond); r.Planned != 1 {
		t.Errorf("a grant older than the crash window is not explained by the crash: %s", r)
	}
	if r := CheckHistory([]Grant{a, b}, []Kill{{At: t0.Add(100 * time.Millisecond), Signal: "SIGKILL", Window: 50 * time.Millisecond}}, w); r.Planned != 1 {
		t.Errorf("a kill's own window is narrower than the checker's: %s", r)
	}
	if r := CheckHistory([]Grant{a, b}, []Kill{{At: t0.Add(100 * time.Millisecond), Signal: "SIGKILL", Window: time.Second}}, 50*time.Millisecond); r.Crash != 1 {
		t.Errorf("a kill's own window is wider than the checker's: %s", r)
	}
	if r := CheckHistory([]Grant{a, after}, nil, w); r.Planned+r.Crash != 0 {
		t.Errorf("grants one after the other: %s", r)
	}
}
