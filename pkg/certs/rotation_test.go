package certs

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	t0    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts = []string{"proxy-lease-api.ns.svc", "localhost", "127.0.0.1"}
	pol   = policy{caName: "test-ca", hosts: hosts, caValidity: 300 * 24 * time.Hour, certValidity: 30 * 24 * time.Hour}
)

func mustRenew(t *testing.T, p policy, cur *state, now time.Time) (*state, []string) {
	t.Helper()
	next, reasons, err := p.renew(cur, now)
	if err != nil {
		t.Fatal(err)
	}
	return next, reasons
}

// verifies reports whether s's serving certificate verifies for host at now
// against s's bundle.
func verifies(s *state, host string, now time.Time) error {
	pool := x509.NewCertPool()
	for _, c := range s.bundle {
		pool.AddCert(c)
	}
	_, err := s.serving.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, CurrentTime: now})
	return err
}

func TestRenew(t *testing.T) {
	first, reasons := mustRenew(t, pol, nil, t0)
	if len(reasons) == 0 {
		t.Fatal("nothing yet: want reasons")
	}
	for _, h := range hosts {
		if err := verifies(first, h, t0); err != nil {
			t.Errorf("first certificate for %s: %v", h, err)
		}
	}
	otherCA, err := NewCA("other", t0, pol.caValidity)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := otherCA.Issue(hosts, t0, pol.certValidity)
	if err != nil {
		t.Fatal(err)
	}
	expiredCA, err := NewCA("expired", t0.Add(-400*24*time.Hour), 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	servingDue := renewAt(first.serving.Cert)
	caDue := renewAt(first.ca.Cert)
	for _, tc := range []struct {
		name        string
		policy      policy
		cur         *state
		now         time.Time
		wantChange  bool
		wantNewCA   bool
		wantBundle  int // certificates in the bundle after
		wantOldInCA bool
	}{
		{name: "fresh: nothing to do", policy: pol, cur: first, now: t0.Add(time.Hour), wantBundle: 1},
		{name: "just before the serving certificate is due", policy: pol, cur: first, now: servingDue.Add(-time.Second), wantBundle: 1},
		{name: "serving certificate due", policy: pol, cur: first, now: servingDue, wantChange: true, wantBundle: 1},
		{name: "CA due: renewed, old CA still trusted", policy: pol, cur: first, now: caDue, wantChange: true, wantNewCA: true, wantBundle: 2, wantOldInCA: true},
		{name: "names changed", policy: policy{caName: pol.caName, hosts: []string{"other.ns.svc"}, caValidity: pol.caValidity, certValidity: pol.certValidity}, cur: first, now: t0.Add(time.Hour), wantChange: true, wantBundle: 1},
		{name: "same names in another order: nothing to do", policy: policy{caName: pol.caName, hosts: []string{"127.0.0.1", "localhost", "proxy-lease-api.ns.svc"}, caValidity: pol.caValidity, certValidity: pol.certValidity}, cur: first, now: t0.Add(time.Hour), wantBundle: 1},
		{name: "serving certificate of another CA", policy: pol, cur: &state{ca: first.ca, bundle: first.bundle, serving: foreign}, now: t0.Add(time.Hour), wantChange: true, wantBundle: 1},
		{name: "expired CA dropped from the bundle", policy: pol, cur: &state{ca: first.ca, bundle: []*x509.Certificate{first.ca.Cert, expiredCA.Cert}, serving: first.serving}, now: t0.Add(time.Hour), wantChange: true, wantBundle: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, reasons := mustRenew(t, tc.policy, tc.cur, tc.now)
			if got := len(reasons) > 0; got != tc.wantChange {
				t.Fatalf("changed = %v (reasons %q), want %v", got, reasons, tc.wantChange)
			}
			if !tc.wantChange && next != tc.cur {
				t.Error("nothing due but the state was replaced")
			}
			if got := !next.ca.Cert.Equal(tc.cur.ca.Cert); got != tc.wantNewCA {
				t.Errorf("new CA = %v, want %v", got, tc.wantNewCA)
			}
			if len(next.bundle) != tc.wantBundle {
				t.Errorf("bundle holds %d certificates, want %d", len(next.bundle), tc.wantBundle)
			}
			if !next.bundle[0].Equal(next.ca.Cert) {
				t.Error("the bundle does not start with the current CA")
			}
			if tc.wantOldInCA && !next.bundle[1].Equal(tc.cur.ca.Cert) {
				t.Error("the renewed CA left the bundle before it expired")
			}
			for _, h := range tc.policy.hosts {
				if err := verifies(next, h, tc.now); err != nil {
					t.Errorf("serving certificate for %s at %s: %v", h, tc.now, err)
				}
			}
			if !tc.now.Before(renewAt(next.serving.Cert)) || !tc.now.Before(renewAt(next.ca.Cert)) {
				t.Error("what renew returned is already due")
			}
		})
	}
}

// The checker above must catch a policy that never renews the serving
// certificate (negative control): after its due time, renewing nothing
// leaves a certificate that is due.
func TestRenewCatchesAStaleCertificate(t *testing.T) {
	first, _ := mustRenew(t, pol, nil, t0)
	late := first.serving.Cert.NotAfter.Add(time.Hour)
	stale := &state{ca: first.ca, bundle: first.bundle, serving: first.serving}
	if err := verifies(stale, hosts[0], late); err == nil {
		t.Fatal("negative control: an expired serving certificate verified")
	}
	next, _ := mustRenew(t, pol, stale, late)
	if err := verifies(next, hosts[0], late); err != nil {
		t.Fatalf("after renewal: %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	first, _ := mustRenew(t, pol, nil, t0)
	caDue := renewAt(first.ca.Cert)
	second, _ := mustRenew(t, pol, first, caDue)
	got, err := parseState(second.data())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(second.data(), got.data()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if _, reasons := mustRenew(t, pol, got, caDue.Add(time.Minute)); len(reasons) != 0 {
		t.Errorf("a parsed, current state is renewed again: %q", reasons)
	}
}

func TestParseStateErrors(t *testing.T) {
	first, _ := mustRenew(t, pol, nil, t0)
	other, _ := mustRenew(t, pol, nil, t0)
	for _, tc := range []struct {
		name string
		edit func(map[string][]byte)
	}{
		{"no CA key", func(d map[string][]byte) { delete(d, KeyCAKey) }},
		{"serving key of another certificate", func(d map[string][]byte) { d[KeyServingKey] = other.serving.KeyPEM }},
		{"garbage certificate", func(d map[string][]byte) {
			d[KeyServingCert] = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := first.data()
			tc.edit(d)
			if _, err := parseState(d); err == nil {
				t.Fatal("parsed")
			}
		})
	}
}

func TestIssueNeverOutlivesTheCA(t *testing.T) {
	ca, err := NewCA("short", t0, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(hosts, t0, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if kp.Cert.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("serving certificate expires %s after its CA %s", kp.Cert.NotAfter, ca.Cert.NotAfter)
	}
	if diff := cmp.Diff([]string{"proxy-lease-api.ns.svc", "localhost", "127.0.0.1"}, Hosts(kp.Cert)); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
}
