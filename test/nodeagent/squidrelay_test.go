package nodeagent

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"

	"github.com/proxy-operator/proxy-operator/test/tunneltest"
)

// liveLists stands in for the operator's live list endpoint: it answers
// what set holds.
type liveLists struct {
	mu        sync.Mutex
	usernames []string
}

func (l *liveLists) set(usernames ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.usernames = usernames
}

func (l *liveLists) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = json.NewEncoder(w).Encode(proxyauth.LiveList{AsOf: time.Now().Unix(), Usernames: append([]string{}, l.usernames...)})
}

// tunnelAs opens a tunnel to target through the proxy at proxyAddr with c.
func tunnelAs(t *testing.T, proxyAddr, target string, c proxyauth.Credentials) net.Conn {
	t.Helper()
	conn, _, err := tunneltest.Tunnel(proxyAddr, "Basic "+base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password)), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A lease's end ends its traffic at the proxy: a CONNECT tunnel and a
// streaming response opened through a real Squid with a lease's
// credentials close within 30 seconds of the lease leaving the live list
// (Squid alone kept such a tunnel for a day), while another lease's tunnel
// on the same Squid goes on relaying (the negative control: nothing closes
// what is still leased).
func TestSquidEndsAReleasedLeasesTraffic(t *testing.T) {
	k := testKeyring(t)
	lists := &liveLists{}
	operator := httptest.NewServer(lists)
	t.Cleanup(operator.Close)
	now := time.Now()
	released := k.LeaseCredentials(authProxy, "released", now, now.Add(time.Hour))
	kept := k.LeaseCredentials(authProxy, "kept", now, now.Add(time.Hour))
	lists.set(released.Username, kept.Username)
	addr := startAuthSquidPolling(t, k, operator.URL)
	echo := tunneltest.EchoServer(t)

	gone := tunnelAs(t, addr, echo, released)
	stays := tunnelAs(t, addr, echo, kept)
	if !tunneltest.Relays(gone) || !tunneltest.Relays(stays) {
		t.Fatal("the tunnels do not relay")
	}
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		for {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-req.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(stream.Close)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr, User: released.Userinfo()})}}
	resp, err := hc.Get(stream.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	streamEnded := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		streamEnded <- time.Now()
	}()

	lists.set(kept.Username)
	releasedAt := time.Now()
	_ = gone.SetDeadline(releasedAt.Add(45 * time.Second))
	for {
		if _, err := gone.Write([]byte("ping")); err != nil {
			break
		}
		if _, err := io.ReadFull(gone, make([]byte, 4)); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	closedAfter := time.Since(releasedAt)
	t.Logf("the released lease's tunnel closed %s after the release", closedAfter.Round(100*time.Millisecond))
	if closedAfter > 30*time.Second {
		t.Errorf("the released lease's tunnel relayed for %s after the release; want at most 30s", closedAfter)
	}
	select {
	case at := <-streamEnded:
		if d := at.Sub(releasedAt); d > 30*time.Second {
			t.Errorf("the released lease's stream ran %s after the release", d)
		}
	case <-time.After(10 * time.Second):
		t.Error("the released lease's stream still runs")
	}
	if !tunneltest.Relays(stays) {
		t.Error("the kept lease's tunnel was closed")
	}
	if code, err := StatusThrough(addr, released.Userinfo(), stream.URL); err != nil || code != http.StatusProxyAuthRequired {
		t.Errorf("a new request with the released lease's credentials: %d (%v), want 407", code, err)
	}
}
