package serving

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestElectionValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Election)
		want []string // substrings of the error; none: valid
	}{
		{name: "the defaults, off", edit: func(*Election) {}},
		{name: "the defaults, on", edit: func(o *Election) { o.Enabled = true }},
		{name: "off: nothing checked", edit: func(o *Election) { o.ID, o.RetryPeriod = "", 0 }},
		{name: "renew deadline not under the lease duration", edit: func(o *Election) { o.Enabled, o.RenewDeadline = true, o.LeaseDuration },
			want: []string{"--leader-election-lease-duration (15s) must exceed --leader-election-renew-deadline (15s)"}},
		{name: "retry period too close to the renew deadline", edit: func(o *Election) { o.Enabled, o.RetryPeriod = true, 9*time.Second },
			want: []string{"1.2 × --leader-election-retry-period (9s)"}},
		{name: "no ID", edit: func(o *Election) { o.Enabled, o.ID = true, "" }, want: []string{"--leader-election-id: required"}},
		{name: "an ID that is no name, and bad timing: both said", edit: func(o *Election) { o.Enabled, o.ID, o.RetryPeriod = true, "Not_A_Name", 0 },
			want: []string{`--leader-election-id "Not_A_Name"`, "--leader-election-retry-period (0s)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultElection()
			tc.edit(&o)
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to say %q", err, w)
				}
			}
		})
	}
}

// A replica outside a pod, or without the election, gets no lock: the
// manager makes its own (and none when off); the Lease's namespace is the
// flag's, else the operator's.
func TestElectionLockAndNamespace(t *testing.T) {
	o := DefaultElection()
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, tc := range []struct {
		name           string
		enabled        bool
		podName, podNS string
		wantLock       bool
	}{
		{"off", false, "op-0", "ops", false},
		{"on, outside a pod", true, "", "ops", false},
		{"on, no namespace", true, "op-0", "", false},
		{"on, in a pod", true, "op-0", "ops", true},
	} {
		o.Enabled = tc.enabled
		lock, err := o.Lock(cfg, tc.podName, tc.podNS)
		if err != nil || (lock != nil) != tc.wantLock {
			t.Errorf("%s: Lock = %v, %v; want a lock %v", tc.name, lock, err, tc.wantLock)
		}
	}
	if got := o.LeaseNamespace("ops"); got != "ops" {
		t.Errorf("LeaseNamespace without the flag = %q, want the operator's", got)
	}
	o.Namespace = "elections"
	if got := o.LeaseNamespace("ops"); got != "elections" {
		t.Errorf("LeaseNamespace with the flag = %q, want it", got)
	}
}
