package deve2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// credLease is what these tests read of a lease answer.
type credLease struct {
	LeaseID     string    `json:"leaseID"`
	Proxy       wireProxy `json:"proxy"`
	Credentials struct {
		Username  string    `json:"username"`
		Password  string    `json:"password"`
		ExpiresAt time.Time `json:"expiresAt"`
	} `json:"credentials"`
}

// revocationBound is how soon a released lease's credentials must stop
// working (issue #25: within 30 seconds).
const revocationBound = 30 * time.Second

// Every proxy of the dev environment, a Squid pod of the node agent and a
// Compute Engine fake VM alike, serves a live lease's credentials and
// nothing else: not no credentials, another proxy's, tampered or expired
// ones, nor a released lease's after 30 seconds; a renewal's new ones work,
// and the health probes keep passing throughout.
func (h *harness) proxyCredentials(t *testing.T) {
	// tier and other name two proxies of a kind (artifacts/examples/fleet).
	for _, tc := range []struct{ kind, tier, other string }{
		{"squid pod", "standard", "premium"},
		{"Compute Engine VM", "vm", "vm"},
	} {
		t.Run(tc.kind, func(t *testing.T) { h.credentialsOf(t, tc.tier, tc.other) })
	}
	// The probes authenticate: the whole fleet is still healthy.
	code, body := h.curl(t, h.env.DiscoveryToken, h.env.DiscoveryURL+"/v1/proxies?healthy=true")
	var list struct {
		Count int `json:"count"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || list.Count != len(h.env.Fleet) {
		t.Errorf("healthy proxies after the credential checks: HTTP %d %s, want all %d", code, body, len(h.env.Fleet))
	}
}

func (h *harness) credentialsOf(t *testing.T, tier, otherTier string) {
	acquire := func(tier string, ttl int) credLease {
		t.Helper()
		code, body := h.curl(t, h.env.DiscoveryToken, "-d",
			fmt.Sprintf(`{"selector":{"tier":%q},"target":"origin","ttlSeconds":%d}`, tier, ttl), h.env.DiscoveryURL+"/v1/leases")
		var l credLease
		if code != 201 || json.Unmarshal([]byte(body), &l) != nil || l.Credentials.Password == "" {
			t.Fatalf("lease of tier %s: HTTP %d %s, want 201 with credentials", tier, code, body)
		}
		return l
	}
	release := func(l credLease) {
		t.Helper()
		if code, body := h.curl(t, h.env.DiscoveryToken, "-X", "DELETE", h.env.DiscoveryURL+"/v1/leases/"+l.LeaseID); code != 204 {
			t.Fatalf("release: HTTP %d %s", code, body)
		}
	}
	// Short, so that its first credentials expire during the test.
	l := acquire(tier, 4)
	other := acquire(otherTier, 60) // another proxy: capacity is 1
	defer release(other)
	if other.Proxy.Name == l.Proxy.Name {
		t.Fatalf("both leases on %s", l.Proxy.Name)
	}
	u, err := url.Parse(l.Proxy.URL)
	if err != nil || u.User.Username() != l.Credentials.Username {
		t.Fatalf("lease URL %q: want the credentials %s as userinfo", l.Proxy.URL, l.Credentials.Username)
	}
	bare := "http://" + u.Host
	with := func(user, pass string) string {
		return (&url.URL{Scheme: "http", User: url.UserPassword(user, pass), Host: u.Host}).String()
	}

	if code := h.through(t, l.Proxy.URL); code != 200 {
		t.Fatalf("the holder's request through %s: HTTP %d, want 200", bare, code)
	}
	tampered := []byte(l.Credentials.Password)
	tampered[10] ^= 1 // still base64url: a letter's case or a digit flips
	for name, proxyURL := range map[string]string{
		"no credentials":       bare,
		"another proxy's":      with(other.Credentials.Username, other.Credentials.Password),
		"a tampered password":  with(l.Credentials.Username, string(tampered)),
		"another lease's name": with(other.Credentials.Username, l.Credentials.Password),
		"a made-up password":   with(l.Credentials.Username, strings.Repeat("A", len(l.Credentials.Password))),
		"the operator's name":  with("proxy-operator-probe", l.Credentials.Password),
		"an empty password":    with(l.Credentials.Username, ""),
		"the bearer token":     with("discovery", h.env.DiscoveryToken),
	} {
		if code := h.through(t, proxyURL); code != 407 {
			t.Errorf("%s: HTTP %d, want 407", name, code)
		}
	}

	// Renewed before its expiry: new credentials, which outlive the first.
	code, body := h.curl(t, h.env.DiscoveryToken, "-d", `{"ttlSeconds":60}`, h.env.DiscoveryURL+"/v1/leases/"+l.LeaseID+"/renew")
	var renewed credLease
	if code != 200 || json.Unmarshal([]byte(body), &renewed) != nil || renewed.Credentials.Password == l.Credentials.Password {
		t.Fatalf("renew: HTTP %d %s, want 200 with new credentials", code, body)
	}
	time.Sleep(time.Until(l.Credentials.ExpiresAt) + time.Second)
	if code := h.through(t, l.Proxy.URL); code != 407 {
		t.Errorf("the first credentials after their expiry %s: HTTP %d, want 407", l.Credentials.ExpiresAt.Format(time.RFC3339), code)
	}
	if code := h.through(t, renewed.Proxy.URL); code != 200 {
		t.Fatalf("the renewed credentials: HTTP %d, want 200", code)
	}

	// Released: the proxy stops taking them within 30 seconds (its helper
	// polls the leases live on it).
	release(renewed)
	releasedAt := time.Now()
	var stopped time.Duration
	for time.Since(releasedAt) < revocationBound+10*time.Second {
		if code := h.through(t, renewed.Proxy.URL); code == 407 {
			stopped = time.Since(releasedAt)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	switch {
	case stopped == 0:
		t.Fatalf("a released lease's credentials still work %s after the release", revocationBound+10*time.Second)
	case stopped > revocationBound:
		t.Errorf("a released lease's credentials stopped working %s after the release, want within %s", stopped, revocationBound)
	default:
		t.Logf("%s proxy %s: a released lease's credentials stopped working %s after the release", tier, renewed.Proxy.Name, stopped.Round(100*time.Millisecond))
	}
	if code := h.through(t, renewed.Proxy.URL); code != 407 {
		t.Errorf("the released lease's credentials work again: HTTP %d", code)
	}
}

// through GETs the origin with curl -x proxyURL and returns the HTTP status
// (0: curl failed).
func (h *harness) through(t *testing.T, proxyURL string) int {
	t.Helper()
	out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--noproxy", "",
		"-x", proxyURL, h.env.OriginURL+"/credentials").CombinedOutput()
	if err != nil {
		t.Errorf("curl -x %s: %v: %s", proxyURL, err, out)
		return 0
	}
	code, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return code
}
