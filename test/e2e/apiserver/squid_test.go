package apiservere2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// squidAddrs is the loopback range this package's Squids bind (other packages
// keep to their own ranges, so test binaries running side by side do not
// collide).
var squidAddrs = [2]string{"127.0.7.2", "127.0.7.40"}

// startSquid runs a squid of squidAddrs for the test.
func startSquid(t *testing.T) *nodeagent.Squid {
	t.Helper()
	pool, err := nodeagent.NewAddrPool(netip.MustParseAddr(squidAddrs[0]), netip.MustParseAddr(squidAddrs[1]))
	if err != nil {
		t.Fatal(err)
	}
	return framework.StartSquid(t, pool, "")
}

func TestLeasedProxyForwardsThroughRealSquid(t *testing.T) {
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hello from the origin, via %s", r.Header.Get("Via"))
	}))
	defer origin.Close()
	sq := startSquid(t)
	listen := sq.Config().ListenAddr()

	ns := namespace(t, "squid")
	p := addProxy(t, ns, "squid-1", exampleSelector(t))
	p.URL, p.Host, p.Port = "http://"+listen, sq.Config().Addr.String(), nodeagent.DefaultSquidPort
	shared.store.UpsertProxy(p)

	pl := parseLease(t, mustKubectlIn(t, example(t, "proxylease.yaml"), "create", "-n", ns, "-f", "-", "-o", "yaml"))
	if pl.Status.Proxy == nil || pl.Status.Proxy.URL != "http://"+listen {
		t.Fatalf("lease status: %+v", pl.Status)
	}
	proxyURL, err := url.Parse(pl.Status.Proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.Get(origin.URL + "/through-the-lease")
	if err != nil {
		t.Fatalf("GET through the leased proxy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "hello from the origin") || !strings.Contains(strings.ToLower(string(body)), "squid") {
		t.Errorf("through the lease: %d %q (want the origin's answer with squid's Via)", resp.StatusCode, body)
	}
	// squid logs a transaction once it has ended, shortly after the answer.
	var accessLog []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if accessLog, _ = os.ReadFile(sq.Config().AccessLogPath()); strings.Contains(string(accessLog), "/through-the-lease") {
			break
		}
	}
	if !strings.Contains(string(accessLog), "/through-the-lease") {
		t.Errorf("squid's access log lacks the request:\n%s", accessLog)
	}
	mustKubectl(t, "delete", "proxylease", pl.Name, "-n", ns)

	// The client-go example does the whole round: lease, fetch, report, delete.
	bin := filepath.Join(t.TempDir(), "client-go-crawler")
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", bin, "./examples/client-go-crawler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example: %v\n%s", err, out)
	}
	before := hits.Load()
	run := exec.Command(bin, "-kubeconfig", shared.cp.KubeconfigPath, "-namespace", ns, "-selector", selectorArg(exampleSelector(t)), "-url", origin.URL+"/by-the-example")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	for _, want := range []string{"leased squid-1 (http://" + listen + ")", "HTTP 200", "reported ok"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("example output lacks %q:\n%s", want, out)
		}
	}
	if hits.Load() != before+1 {
		t.Errorf("the origin saw %d requests from the example, want 1", hits.Load()-before)
	}
	if n := len(shared.store.List(ns)); n != 0 {
		t.Errorf("the example left %d leases", n)
	}
}
