package proxyauth

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

var (
	start  = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	proxyA = ProxyRef{Namespace: "crawl", Name: "a"}
	proxyB = ProxyRef{Namespace: "crawl", Name: "b"}
)

func newKeyring(t *testing.T, clk *clocktesting.FakeClock) *Keyring {
	t.Helper()
	k, err := NewKeyring(bytes.Repeat([]byte{7}, MinKeySize), clk)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewKeyringRefusesShortKeys(t *testing.T) {
	if _, err := NewKeyring(make([]byte, MinKeySize-1), nil); err == nil {
		t.Fatal("a 31-byte key was accepted")
	}
}

// tamper changes one character of s to another of the same alphabet.
func tamper(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// spareBits changes the bits of s's last base64 character that encode no
// byte: a lax decoder returns the same bytes.
func spareBits(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, s[len(s)-1])
	return s[:len(s)-1] + string(alphabet[i^1])
}

// A proxy's helper accepts the credentials of a lease on that proxy and the
// operator's probes, and refuses everything else with its reason.
func TestVerifierAcceptsOnlyItsProxysCredentials(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	v := NewVerifier(k.HelperConfig(proxyA, "", ""), clk)
	expires := start.Add(5 * time.Minute)
	lease := k.LeaseCredentials(proxyA, "lease-1", start, expires)
	otherKeyring, err := NewKeyring(bytes.Repeat([]byte{8}, MinKeySize), clk)
	if err != nil {
		t.Fatal(err)
	}
	probe := k.ProbeCredentials(proxyA)
	longProbe := mint(k.ProxyKey(proxyA), kindProbe, proxyA, ProbeUsername, start, time.Unix(1<<32-1, 0))
	futureProbe := mint(k.ProxyKey(proxyA), kindProbe, proxyA, ProbeUsername, start.Add(time.Hour), start.Add(2*time.Hour))
	cases := []struct {
		name       string
		user, pass string
		after      time.Duration
		want       error
	}{
		{"the holder's credentials", lease.Username, lease.Password, 0, nil},
		{"until a second before they expire", lease.Username, lease.Password, 5*time.Minute - time.Second, nil},
		{"expired", lease.Username, lease.Password, 5 * time.Minute, ErrExpired},
		{"a lease on another proxy", "", "", 0, ErrBadSignature},
		{"another installation's key", "", "", 0, ErrBadSignature},
		{"another lease's username", Handle("lease-2"), lease.Password, 0, ErrBadSignature},
		{"a tampered MAC", lease.Username, tamper(lease.Password, len(lease.Password)-3), 0, ErrBadSignature},
		{"a tampered expiry", lease.Username, tamper(lease.Password, 7), 0, ErrBadSignature},
		{"no password", lease.Username, "", 0, ErrMalformed},
		{"not base64", lease.Username, "!!!!", 0, ErrMalformed},
		{"another encoding of the same bytes", lease.Username, spareBits(lease.Password), 0, ErrMalformed},
		{"a probe", probe.Username, probe.Password, 0, nil},
		{"a probe after a minute", probe.Username, probe.Password, ProbeTTL, ErrExpired},
		// Minted with the proxy's key (from its Secret) to expire in 2106:
		// refused once older than a probe's life.
		{"a long-lived probe, fresh", ProbeUsername, longProbe, 0, nil},
		{"a long-lived probe, a day later", ProbeUsername, longProbe, 24 * time.Hour, ErrExpired},
		{"a probe issued an hour ahead", ProbeUsername, futureProbe, 0, ErrExpired},
		{"a probe's password for a lease", lease.Username, probe.Password, 0, ErrBadSignature},
		{"a lease's password for a probe", ProbeUsername, lease.Password, 0, ErrBadSignature},
		{"a list token as credentials", listUsername, ListToken(k.ProxyKey(proxyA), proxyA, start), 0, ErrBadSignature},
	}
	cases[3].user, cases[3].pass = func() (string, string) {
		c := k.LeaseCredentials(proxyB, "lease-1", start, expires)
		return c.Username, c.Password
	}()
	cases[4].user, cases[4].pass = func() (string, string) {
		c := otherKeyring.LeaseCredentials(proxyA, "lease-1", start, expires)
		return c.Username, c.Password
	}()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk.SetTime(start.Add(tc.after))
			err := v.Check(tc.user, tc.pass)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Check = %v, want %v", err, tc.want)
			}
		})
	}
}

// Per-proxy keys: the key of one proxy verifies nothing of another, so a
// proxy cannot mint for its neighbours.
func TestProxyKeysAreDistinct(t *testing.T) {
	k := newKeyring(t, clocktesting.NewFakeClock(start))
	if bytes.Equal(k.ProxyKey(proxyA), k.ProxyKey(proxyB)) {
		t.Fatal("two proxies share a key")
	}
	// A name boundary cannot be moved: ns "a", name "bc" vs ns "ab", name "c".
	if bytes.Equal(k.ProxyKey(ProxyRef{"a", "bc"}), k.ProxyKey(ProxyRef{"ab", "c"})) {
		t.Fatal("keys of a/bc and ab/c are equal")
	}
}

// A renewal mints new credentials; both work while the lease lives (the
// old ones until their own expiry).
func TestRenewedCredentials(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	v := NewVerifier(k.HelperConfig(proxyA, "", ""), clk)
	first := k.LeaseCredentials(proxyA, "lease-1", start, start.Add(time.Minute))
	renewed := k.LeaseCredentials(proxyA, "lease-1", start, start.Add(3*time.Minute))
	if first.Username != renewed.Username || first.Password == renewed.Password {
		t.Fatalf("renewal: %+v then %+v: want the same username and a new password", first, renewed)
	}
	clk.SetTime(start.Add(2 * time.Minute))
	if err := v.Check(first.Username, first.Password); !errors.Is(err, ErrExpired) {
		t.Fatalf("the first credentials after their expiry: %v", err)
	}
	if err := v.Check(renewed.Username, renewed.Password); err != nil {
		t.Fatalf("the renewed credentials: %v", err)
	}
}

func TestExpiryRoundsUp(t *testing.T) {
	k := newKeyring(t, clocktesting.NewFakeClock(start))
	c := k.LeaseCredentials(proxyA, "l", start, start.Add(1500*time.Millisecond))
	if want := start.Add(2 * time.Second); !c.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %s, want %s", c.ExpiresAt, want)
	}
}

// The live list ends a released lease's credentials: once the helper's list
// was made after the grant and lacks the lease, they are refused; a lease
// newer than the list passes; a stale list decides nothing.
func TestLiveList(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	v := NewVerifier(k.HelperConfig(proxyA, "", ""), clk)
	held := k.LeaseCredentials(proxyA, "held", start, start.Add(time.Hour))
	released := k.LeaseCredentials(proxyA, "released", start, start.Add(time.Hour))

	clk.Step(10 * time.Second)
	v.SetLive(LiveList{AsOf: clk.Now().Unix(), Usernames: []string{held.Username}})
	newer := k.LeaseCredentials(proxyA, "newer", clk.Now(), clk.Now().Add(time.Hour))
	for _, tc := range []struct {
		name string
		c    Credentials
		want error
	}{
		{"listed", held, nil},
		{"released before the list", released, ErrNotLive},
		{"granted since the list", newer, nil},
	} {
		if err := v.Check(tc.c.Username, tc.c.Password); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Check = %v, want %v", tc.name, err, tc.want)
		}
	}
	clk.Step(StaleAfter + time.Second)
	if err := v.Check(released.Username, released.Password); err != nil {
		t.Errorf("with a stale list the expiry decides: %v", err)
	}
}

// Squid's helper protocol, with and without concurrency channels: every line
// is answered in order on its channel, whatever a client put in it, and the
// helper goes on (a line over 4,096 bytes ended it, and its Squid with it).
func TestServe(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	v := NewVerifier(k.HelperConfig(proxyA, "", ""), clk)
	c := k.LeaseCredentials(proxyA, "l", start, start.Add(time.Minute))
	good := url.PathEscape(c.Username) + " " + url.PathEscape(c.Password)
	in := strings.Join([]string{
		"0 " + good,
		"1 " + c.Username + " " + tamper(c.Password, 20),
		good,
		"7 only-two",
		"8 one two three",
		"9 " + c.Username + " " + strings.Repeat("A", 7000),
		"10 " + strings.Repeat("%41", 100_000) + " x",
		strings.Repeat("B", maxLine) + " " + good,
		"11 %zz %zz",
		"12 " + good + "\r",
		"",
		"\x00\x00 \xff\xfe \x00",
		"13 " + good,
		"14 " + good,
	}, "\n")
	var out bytes.Buffer
	if err := Serve(strings.NewReader(in), &out, v); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0 OK",
		"1 ERR message=credentials%20not%20signed%20for%20this%20proxy",
		"OK",
		"7 ERR message=want:%20%5Bchannel%5D%20username%20password",
		"8 ERR message=want:%20%5Bchannel%5D%20username%20password",
		"9 ERR message=request%20over%204096%20bytes",
		"10 ERR message=request%20over%204096%20bytes",
		"ERR message=request%20over%204096%20bytes",
		"11 ERR message=malformed%20credentials",
		"12 OK",
		"ERR message=want:%20%5Bchannel%5D%20username%20password",
		"ERR message=want:%20%5Bchannel%5D%20username%20password",
		"13 OK",
		"14 OK", // the last line, without a newline
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
}

// FuzzServe: whatever Squid relays, the helper answers each line once, in
// order, with OK or ERR on the line's channel, and keeps reading.
func FuzzServe(f *testing.F) {
	clk := clocktesting.NewFakeClock(start)
	k, err := NewKeyring(bytes.Repeat([]byte{7}, MinKeySize), clk)
	if err != nil {
		f.Fatal(err)
	}
	v := NewVerifier(k.HelperConfig(proxyA, "", ""), clk)
	c := k.LeaseCredentials(proxyA, "l", start, start.Add(time.Minute))
	for _, seed := range []string{
		"0 " + url.PathEscape(c.Username) + " " + url.PathEscape(c.Password) + "\n",
		"1 a b\n2 c\n\n",
		"3 " + strings.Repeat("x", 2*maxLine) + "\n4 a b",
		"\r\n\x00 %\n",
		strings.Repeat("9", maxLine+1),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		if err := Serve(bytes.NewReader(in), &out, v); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		lines := strings.SplitAfter(string(in), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		answers := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if out.Len() == 0 {
			answers = nil
		}
		if len(answers) != len(lines) {
			t.Fatalf("%d answers to %d lines: %q", len(answers), len(lines), answers)
		}
		for i, a := range answers {
			kept := lines[i][:min(len(lines[i]), maxLine)] // of a longer line, the helper reads no more
			channel := channelOf(strings.Fields(kept))
			rest, ok := strings.CutPrefix(a, channel)
			why, isErr := strings.CutPrefix(rest, "ERR message=")
			if !ok || (rest != "OK" && !isErr) || strings.ContainsAny(why, " \r\x00") {
				t.Errorf("line %d (%.40q): answer %q, want %qOK or ERR message=…", i, lines[i], a, channel)
			}
		}
	})
}

// The poller reads the operator's answer with a list token the keyring
// accepts for that proxy only.
func TestPoller(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	var status = http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := ProxyRef{Namespace: r.URL.Query().Get("namespace"), Name: r.URL.Query().Get("name")}
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if r.URL.Path != LivePath || scheme != AuthScheme || k.VerifyListToken(p, token) != nil || k.VerifyListToken(proxyB, token) == nil {
			http.Error(w, "bad poll", http.StatusForbidden)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"asOf":` + strconv.FormatInt(start.Add(10*time.Second).Unix(), 10) + `,"usernames":["` + Handle("held") + `"]}`))
	}))
	defer srv.Close()
	cfg := k.HelperConfig(proxyA, srv.URL, "")
	v := NewVerifier(cfg, clk)
	p, err := NewPoller(cfg, v, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	released := k.LeaseCredentials(proxyA, "released", start, start.Add(time.Hour))
	if err := v.Check(released.Username, released.Password); !errors.Is(err, ErrNotLive) {
		t.Fatalf("after a poll, a lease missing from the list: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := p.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a standby's answer: %v", err)
	}
	if err := v.Check(released.Username, released.Password); !errors.Is(err, ErrNotLive) {
		t.Fatalf("a failed poll dropped the last list: %v", err)
	}
}

// A helper Squid (re)starts answers nothing before its first live list: a
// released lease's credentials, signed and unexpired, were accepted until
// the first poll came back.
func TestHelperAnswersAfterItsFirstList(t *testing.T) {
	k, err := NewKeyring(bytes.Repeat([]byte{7}, MinKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		polls.Add(1)
		time.Sleep(300 * time.Millisecond) // a slow operator
		_, _ = w.Write([]byte(`{"asOf":` + strconv.FormatInt(time.Now().Unix(), 10) + `,"usernames":[]}`))
	}))
	defer srv.Close()
	config := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(config, k.HelperConfig(proxyA, srv.URL, "").Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	released := k.LeaseCredentials(proxyA, "released", now.Add(-time.Minute), now.Add(time.Hour))
	in := strings.NewReader("0 " + url.PathEscape(released.Username) + " " + url.PathEscape(released.Password) + "\n")
	var out bytes.Buffer
	if err := RunHelper(context.Background(), config, in, &out, t.Logf); err != nil {
		t.Fatal(err)
	}
	if want := "0 ERR message=" + url.PathEscape(ErrNotLive.Error()) + "\n"; out.String() != want {
		t.Errorf("first answer %q, want %q", out.String(), want)
	}
	if n := polls.Load(); n != 1 {
		t.Errorf("%d polls, want 1", n)
	}
}

func TestVerifyListToken(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	tok := ListToken(k.ProxyKey(proxyA), proxyA, start)
	if err := k.VerifyListToken(proxyA, tok); err != nil {
		t.Fatal(err)
	}
	if err := k.VerifyListToken(proxyB, tok); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("another proxy's token: %v", err)
	}
	old := ListToken(k.ProxyKey(proxyA), proxyA, start.Add(-3*time.Minute))
	if err := k.VerifyListToken(proxyA, old); !errors.Is(err, ErrExpired) {
		t.Fatalf("a token of 3 minutes ago: %v", err)
	}
	future := ListToken(k.ProxyKey(proxyA), proxyA, start.Add(3*time.Minute))
	if err := k.VerifyListToken(proxyA, future); !errors.Is(err, ErrExpired) {
		t.Fatalf("a token of 3 minutes ahead: %v", err)
	}
}

func TestHelperConfig(t *testing.T) {
	k := newKeyring(t, clocktesting.NewFakeClock(start))
	c := k.HelperConfig(proxyA, "https://operator:8443", "")
	c.Egress = Egress{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, DeniedCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")},
		AllowedPorts: []PortRange{{8000, 8999}, {22, 22}}}
	got, err := ParseHelperConfig(c.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{}`, `{"namespace":"a","name":"b","key":"AAAA"}`, `not json`,
		`{"namespace":"a","name":"b","key":"` + strings.Repeat("A", 43) + `=","egress":{"allowedPorts":["0-9"]}}`,
		`{"namespace":"a","name":"b","key":"` + strings.Repeat("A", 43) + `=","operatorURL":"ftp://x"}`} {
		if _, err := ParseHelperConfig([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// The configuration each instance gets carries the operator's egress flags,
// which its relay enforces.
func TestInstancesCarryTheEgress(t *testing.T) {
	k := newKeyring(t, clocktesting.NewFakeClock(start))
	o := Options{SecretName: DefaultSecretName, Namespace: "ops", AllowedCIDRs: []string{"10.9.0.0/16"}, AllowedPorts: []string{"8443"}}
	in, err := o.Instances(k)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseHelperConfig(in.InstanceAuth("crawl", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Egress.Permits(netip.MustParseAddrPort("10.9.1.1:8443"), true); err != nil {
		t.Errorf("the flags' range and port: %v", err)
	}
	if err := c.Egress.Permits(netip.MustParseAddrPort("10.8.1.1:443"), true); err == nil {
		t.Error("a private range the flags do not open was permitted")
	}
}
