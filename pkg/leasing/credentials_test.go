package leasing

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// A lease carries its proxy's credentials (in its URL too), the proxy's
// live list names it until it ends, and only that proxy's helper may read
// the list.
func TestCredentialsAndLiveList(t *testing.T) {
	e := newServiceEnv(t, time.Minute)
	e.store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "ext", URL: "http://proxy.example:8080", Host: "proxy.example", Port: 8080,
		Healthy: true, External: true})
	keyring, err := proxyauth.NewKeyring(make([]byte, proxyauth.MinKeySize), e.clk)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(APIHTTP, time.Minute, ServiceDeps{Store: e.store, Queue: e.queue, Clock: e.clk, Auth: keyring})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	managed, err := svc.Acquire(ctx, request(time.Minute, 0))
	if err != nil {
		t.Fatal(err)
	}
	external, err := svc.Acquire(ctx, request(time.Minute, 0))
	if err != nil {
		t.Fatal(err)
	}
	if managed.Proxy.External {
		managed, external = external, managed
	}

	c, ok := svc.Credentials(*managed)
	if !ok {
		t.Fatal("a Managed proxy's lease has no credentials")
	}
	want := keyring.LeaseCredentials(proxyauth.ProxyRef{Namespace: "ns", Name: managed.Proxy.Name}, managed.ID, managed.AcquiredAt, managed.ExpiresAt)
	if c != want {
		t.Fatalf("Credentials = %+v, want %+v", c, want)
	}
	u, err := url.Parse(svc.ProxyURL(*managed))
	if err != nil || u.User.Username() != c.Username || u.Host != managed.Proxy.Host+":3128" {
		t.Fatalf("ProxyURL = %q (%v), want the proxy's URL with %s as userinfo", svc.ProxyURL(*managed), err, c.Username)
	}
	if pw, _ := u.User.Password(); pw != c.Password {
		t.Fatalf("ProxyURL's password %q, want %q", pw, c.Password)
	}
	if _, ok := svc.Credentials(*external); ok || svc.ProxyURL(*external) != "http://proxy.example:8080" {
		t.Fatalf("an External proxy's lease: credentials %v, URL %q; want none", ok, svc.ProxyURL(*external))
	}
	if _, ok := e.svc.Credentials(*managed); ok {
		t.Fatal("a service without Auth minted credentials")
	}

	p1 := proxyauth.ProxyRef{Namespace: "ns", Name: managed.Proxy.Name}
	token := proxyauth.ListToken(keyring.ProxyKey(p1), p1, e.clk.Now())
	live, err := svc.LiveList(ctx, p1, token)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(live.Usernames, c.Username) || live.AsOf != e.clk.Now().Unix() {
		t.Fatalf("live list %+v: want %s as of now", live, c.Username)
	}
	if _, err := svc.LiveList(ctx, proxyauth.ProxyRef{Namespace: "ns", Name: "ext"}, token); !IsForbidden(err) {
		t.Fatalf("p1's token for another proxy's list: %v, want Forbidden", err)
	}
	if _, err := svc.Release("http:a", managed.ID); err != nil {
		t.Fatal(err)
	}
	if live, err = svc.LiveList(ctx, p1, token); err != nil || len(live.Usernames) != 0 {
		t.Fatalf("after the release: %+v, %v; want an empty list", live, err)
	}
}
