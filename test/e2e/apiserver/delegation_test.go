package apiservere2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerDelegatesAuthenticationAndAuthorization talks to the aggregated
// server directly, as kube-apiserver's aggregation layer does: the front-proxy
// client certificate plus X-Remote-* headers. It trusts the front proxy's
// user (its delegated requestheader authentication, with the CA it read from
// kube-system/extension-apiserver-authentication) and, for ProxyLease
// requests, kube-apiserver's authorization of them (frontproxy.go); headers
// without that certificate are not trusted.
func TestServerDelegatesAuthenticationAndAuthorization(t *testing.T) {
	ns := namespace(t, "delegation")
	addProxy(t, ns, "px", nil)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(shared.server.CABundle()) {
		t.Fatal("the server's CA bundle does not parse")
	}
	proxyCert, err := tls.LoadX509KeyPair(shared.cp.ProxyClientCertPath, shared.cp.ProxyClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	clientFor := func(serverName string, certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, Certificates: certs, ServerName: serverName, MinVersion: tls.VersionTLS12,
		}}}
	}
	// The aggregator dials with the Service's DNS name as TLS server name.
	client := func(certs ...tls.Certificate) *http.Client {
		return clientFor("proxy-lease-api.proxy-operator-system.svc", certs...)
	}
	list := "/apis/leasing.crawl.example.com/v1alpha1/namespaces/" + ns + "/proxyleases"
	get := func(c *http.Client, user string, groups ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, shared.serverURL+list, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.Header.Set("X-Remote-User", user)
		}
		for _, g := range groups {
			req.Header.Add("X-Remote-Group", g)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s as %q: %v", list, user, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	front := client(proxyCert)
	// kube-apiserver authorized this request before proxying it: no second
	// review (a user kube-apiserver refuses never gets here; see
	// TestEveryRequestIsAuthorizedAsTheCaller).
	if code, body := get(front, "system:serviceaccount:"+ns+":crawler", "system:serviceaccounts", "system:authenticated"); code != http.StatusOK || !strings.Contains(body, "ProxyLeaseList") {
		t.Errorf("a user through the front proxy: %d %s, want 200 on kube-apiserver's authorization", code, body)
	}
	if code, body := get(front, "someone-admin", "system:masters", "system:authenticated"); code != http.StatusOK || !strings.Contains(body, "ProxyLeaseList") {
		t.Errorf("system:masters through the front proxy: %d %s, want 200", code, body)
	}
	// Headers without the front proxy's certificate are not trusted: the
	// request is anonymous and anonymous may not list.
	if code, _ := get(client(), "someone-admin", "system:masters"); code != http.StatusForbidden && code != http.StatusUnauthorized {
		t.Errorf("forged headers without the front-proxy certificate: %d, want 401/403", code)
	}
	// Negative control for the certificate: it covers the Service's names,
	// not any name.
	if _, err := clientFor("elsewhere.example", proxyCert).Get(shared.serverURL + list); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Errorf("TLS with a server name the certificate lacks: %v, want a certificate error", err)
	}
}

// The library reads the front proxy's CA from an informer that fills only
// once the server listens: before that the server is not Ready (a replica
// that is not Ready takes no serving label, so kube-apiserver sends it
// nothing it would misread as system:anonymous), and it is Ready once the
// CA is loaded.
func TestServerReadyOnceTheFrontProxyCAIsLoaded(t *testing.T) {
	if err := shared.readyBeforeStart; err == nil || !strings.Contains(err.Error(), "extension-apiserver-authentication") {
		t.Errorf("Ready before the server started = %v, want the front proxy's CA not loaded yet", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := shared.server.Ready(nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never turned Ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
