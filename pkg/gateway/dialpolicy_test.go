package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
)

// The gateway dials no leased proxy the operator's dial policy denies (a
// Proxy whose endpoint was pointed at the API server, say), in plain HTTP
// or CONNECT: the client gets 502 saying so and the address sees no
// connection. The control: the same gateway without the policy reaches it.
func TestLeasedProxyAtADeniedAddress(t *testing.T) {
	var seen []string
	up := upstreamProxy(t, &seen)
	upAddr := netip.MustParseAddrPort(strings.TrimPrefix(up.URL, "http://"))
	for _, tc := range []struct {
		name   string
		denied dialpolicy.Denylist
		want   int
	}{
		{"denied endpoint", dialpolicy.Denylist{Endpoints: []netip.AddrPort{upAddr}}, http.StatusBadGateway},
		{"denied range", dialpolicy.Denylist{Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, http.StatusBadGateway},
		{"no policy (control)", dialpolicy.Denylist{}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen = nil
			hc, gw := gatewayClient(t, Deps{Leaser: proxiedLeaser{newFakeLeaser(time.Now), up.URL}, Denied: tc.denied})
			resp, err := hc.Get("http://site.example/page")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("plain HTTP: %d %s, want %d", resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusBadGateway {
				if !strings.Contains(string(body), "may not dial") {
					t.Errorf("plain HTTP answer %s does not say the address is denied", body)
				}
				if len(seen) != 0 {
					t.Errorf("the denied proxy received %d requests", len(seen))
				}
				if code := connectThroughGateway(t, gw.Listener.Addr().String(), "site.example:443"); code != http.StatusBadGateway {
					t.Errorf("CONNECT: %d, want 502", code)
				}
			}
		})
	}
}

// connectThroughGateway sends CONNECT authority to the gateway at addr with
// a token and returns the status.
func connectThroughGateway(t *testing.T, addr, authority string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\nProxy-Authorization: Basic Y3Jhd2xlcjp0b2s=\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
