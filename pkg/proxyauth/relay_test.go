package proxyauth

import (
	"bufio"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/test/tunneltest"
)

// loopback opens the tests' origins (loopback, any port) as
// --proxy-allowed-cidrs and --proxy-allowed-ports would.
var loopback = Egress{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, AllowedPorts: []PortRange{{1, 65535}}}

// startRelay serves a relay of proxyA under e, with a verifier on clk.
func startRelay(t *testing.T, clk *clocktesting.FakeClock, e Egress) (*Relay, *Verifier, string) {
	t.Helper()
	v := NewVerifier(newKeyring(t, clk).HelperConfig(proxyA, "", ""), clk)
	r := NewRelay(v, e, clk)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, v, srv.Listener.Addr().String()
}

func basic(c Credentials) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password))
}

// connect opens a tunnel to target through the relay at relay as Squid does
// (CONNECT with the client's Proxy-Authorization), and returns the
// connection (nil unless 200) and the relay's status.
func connect(t *testing.T, relay, target string, c Credentials) (net.Conn, int) {
	t.Helper()
	conn, resp, err := tunneltest.Tunnel(relay, basic(c), target)
	if resp == nil {
		t.Fatal(err)
	}
	if conn != nil {
		t.Cleanup(func() { _ = conn.Close() })
	}
	return conn, resp.StatusCode
}

// TestRelayEndsTheTrafficOfEndedLeases: a tunnel and a streaming response
// of a lease that leaves the live list end at the next Sweep; another
// lease's tunnel goes on (the negative control: Sweep ends only what it
// must), and so does a renewed lease's tunnel opened with credentials that
// have since expired.
func TestRelayEndsTheTrafficOfEndedLeases(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	k := newKeyring(t, clk)
	r, v, addr := startRelay(t, clk, loopback)
	echo := tunneltest.EchoServer(t)
	released := k.LeaseCredentials(proxyA, "released", start, start.Add(time.Minute))
	kept := k.LeaseCredentials(proxyA, "kept", start, start.Add(time.Minute))
	renewed := k.LeaseCredentials(proxyA, "renewed", start, start.Add(30*time.Second))
	streamed := k.LeaseCredentials(proxyA, "streamed", start, start.Add(time.Minute))
	v.SetLive(LiveList{AsOf: start.Unix(), Usernames: []string{released.Username, kept.Username, renewed.Username, streamed.Username}})

	tunnels := map[string]net.Conn{}
	for name, c := range map[string]Credentials{"released": released, "kept": kept, "renewed": renewed} {
		conn, code := connect(t, addr, echo, c)
		if code != http.StatusOK || !tunneltest.Relays(conn) {
			t.Fatalf("%s: CONNECT %d, or no echo", name, code)
		}
		tunnels[name] = conn
	}
	// A response that streams until its request ends.
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.WriteString(w, "first chunk\n")
		w.(http.Flusher).Flush()
		<-req.Context().Done()
	}))
	t.Cleanup(origin.Close)
	req, _ := http.NewRequest(http.MethodGet, origin.URL+"/stream", nil)
	req.Header.Set("Proxy-Authorization", basic(streamed))
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "first chunk\n" {
		t.Fatalf("stream: %q, %v", line, err)
	}
	if got := r.InFlight(); got != 4 {
		t.Fatalf("InFlight = %d, want 4", got)
	}
	if n := r.Sweep(); n != 0 {
		t.Fatalf("Sweep with every lease live ended %d", n)
	}

	// "released" and "streamed" leave the list; "renewed"'s credentials
	// expire while its lease lives on.
	clk.Step(45 * time.Second)
	v.SetLive(LiveList{AsOf: clk.Now().Unix(), Usernames: []string{kept.Username, renewed.Username}})
	if n := r.Sweep(); n != 2 {
		t.Errorf("Sweep ended %d, want 2 (the released tunnel, the stream)", n)
	}
	if !tunneltest.StopsRelaying(tunnels["released"], 5*time.Second) {
		t.Error("the released lease's tunnel still relays")
	}
	if _, err := io.ReadAll(body); err == nil {
		t.Error("the ended lease's stream ended cleanly; want it cut")
	}
	for _, name := range []string{"kept", "renewed"} {
		if !tunneltest.Relays(tunnels[name]) {
			t.Errorf("the %s lease's tunnel was ended", name)
		}
	}
	// With no fresh list the credential's own expiry decides.
	clk.Step(StaleAfter + time.Second)
	if n := r.Sweep(); n != 2 {
		t.Errorf("Sweep with a stale list ended %d, want 2 (both past their credentials' expiry)", n)
	}
	if !tunneltest.StopsRelaying(tunnels["kept"], 5*time.Second) {
		t.Error("a tunnel past its credentials' expiry with no fresh list still relays")
	}
}

// TestRelayRefuses: credentials as the helper checks them (407), and the
// Egress on the address dialled (403), for tunnels and plain requests.
func TestRelayRefuses(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	k := newKeyring(t, clk)
	_, _, open := startRelay(t, clk, loopback)
	_, _, strict := startRelay(t, clk, Egress{})
	echo := tunneltest.EchoServer(t)
	good := k.LeaseCredentials(proxyA, "l", clk.Now(), clk.Now().Add(time.Minute))
	forged := good
	forged.Password = tamper(good.Password, 3)
	other := k.LeaseCredentials(proxyB, "l", clk.Now(), clk.Now().Add(time.Minute))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "origin") }))
	t.Cleanup(origin.Close)
	for _, tc := range []struct {
		name        string
		relay       string
		c           Credentials
		tunnel, get int
	}{
		{"a lease, loopback opened", open, good, http.StatusOK, http.StatusOK},
		{"a forged password", open, forged, http.StatusProxyAuthRequired, http.StatusProxyAuthRequired},
		{"another proxy's", open, other, http.StatusProxyAuthRequired, http.StatusProxyAuthRequired},
		{"a probe", open, k.ProbeCredentials(proxyA), http.StatusOK, http.StatusOK},
		{"loopback, by default", strict, good, http.StatusForbidden, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, code := connect(t, tc.relay, echo, tc.c); code != tc.tunnel {
				t.Errorf("CONNECT: %d, want %d", code, tc.tunnel)
			}
			req, _ := http.NewRequest(http.MethodGet, origin.URL, nil)
			req.Header.Set("Proxy-Authorization", basic(tc.c))
			hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: tc.relay})}}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.get {
				t.Errorf("GET: %d %s, want %d", resp.StatusCode, b, tc.get)
			}
			if tc.get == http.StatusOK && string(b) != "origin" {
				t.Errorf("GET: %q", b)
			}
		})
	}
}

// TestEgressPermits is the relay's check on the address dialled, which
// must match SquidRules.
func TestEgressPermits(t *testing.T) {
	e := Egress{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, DeniedCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
		AllowedPorts: []PortRange{{8000, 8999}}}
	for _, tc := range []struct {
		ap      string
		connect bool
		ok      bool
	}{
		{"93.184.216.34:443", true, true},
		{"93.184.216.34:80", true, false},
		{"93.184.216.34:80", false, true},
		{"93.184.216.34:8080", true, true},
		{"93.184.216.34:22", false, false},
		{"127.0.0.1:443", true, false},
		{"[::ffff:127.0.0.1]:443", true, false},
		{"169.254.169.254:80", false, false},
		{"10.2.0.1:443", true, false},
		{"10.1.2.3:443", true, true},
		{"203.0.113.9:443", true, false},
		{"[fd00::1]:443", true, false},
		{"[2606:4700::1]:443", true, true},
	} {
		err := e.Permits(netip.MustParseAddrPort(tc.ap), tc.connect)
		if (err == nil) != tc.ok {
			t.Errorf("Permits(%s, connect=%v) = %v, want ok=%v", tc.ap, tc.connect, err, tc.ok)
		}
		if err != nil && !IsEgressRefused(err) {
			t.Errorf("%s: %v is not an EgressError", tc.ap, err)
		}
	}
	if IsEgressRefused(errors.New("x")) || !strings.Contains((&EgressError{Reason: "r"}).Error(), "r") {
		t.Error("IsEgressRefused or Error is wrong")
	}
}
