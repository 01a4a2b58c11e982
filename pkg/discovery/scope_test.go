package discovery

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// A token whose line names namespaces leases and lists there only (#26 item
// 5): a request for another namespace is 403, one without a namespace is
// served from its namespaces, and the proxy list shows nothing else. The
// token without namespaces still reaches every namespace. On the code
// before, such a token file did not even load.
func TestTokenNamespaces(t *testing.T) {
	tokens, err := ParseTokens([]byte("tok-team,team,b;c\ntok-all,everyone\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Tokens = tokens })
	for _, p := range []lease.ProxyInfo{
		{Namespace: "b", Name: "b-1", URL: "http://10.0.1.1:3128", Host: "10.0.1.1", Port: 3128, LatencyMillis: 50, Healthy: true},
		{Namespace: "c", Name: "c-1", URL: "http://10.0.2.1:3128", Host: "10.0.2.1", Port: 3128, LatencyMillis: 40, Healthy: true},
	} {
		e.store.UpsertProxy(p)
	}
	team, all := "Bearer tok-team", "Bearer tok-all"

	listed := func(auth, query string) (int, []string) {
		t.Helper()
		r := e.do("GET", "/v1/proxies"+query, "", auth)
		if r.status != http.StatusOK {
			return r.status, nil
		}
		var l wire.ProxyList
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range l.Proxies {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		return r.status, names
	}
	if code, names := listed(team, ""); code != 200 || !slices.Equal(names, []string{"b/b-1", "b/eu-2", "c/c-1"}) {
		t.Errorf("the team's list: %d %v, want b's and c's proxies only", code, names)
	}
	if code, _ := listed(team, "?namespace=a"); code != http.StatusForbidden {
		t.Errorf("the team's list of namespace a: %d, want 403", code)
	}
	if code, names := listed(all, ""); code != 200 || len(names) != 5 {
		t.Errorf("the unscoped token's list: %d %v, want all 5 proxies", code, names)
	}

	if r := e.do("POST", "/v1/leases", `{"namespace":"a"}`, team); r.status != http.StatusForbidden || errorCode(t, r.body) != wire.CodeForbidden {
		t.Errorf("the team leasing in namespace a: %d %s, want 403 forbidden", r.status, r.body)
	}
	if n := len(e.store.List("a")); n != 0 {
		t.Errorf("a refused request leased %d proxies of namespace a", n)
	}
	var got []string
	for range 2 {
		r := e.do("POST", "/v1/leases", `{}`, team)
		if r.status != http.StatusCreated {
			t.Fatalf("the team leasing without a namespace: %d %s", r.status, r.body)
		}
		var l wire.Lease
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Proxy.Namespace+"/"+l.Proxy.Name)
	}
	if !slices.Equal(got, []string{"c/c-1", "b/b-1"}) {
		t.Errorf("the team's leases without a namespace: %v, want c's then b's healthy proxy (selection order)", got)
	}
	if r := e.do("POST", "/v1/leases", `{}`, team); r.status != http.StatusConflict {
		t.Errorf("the team with its namespaces leased out: %d %s, want 409 no_match (a's proxies are not its own)", r.status, r.body)
	}
	if r := e.do("POST", "/v1/leases", `{"namespace":"a"}`, all); r.status != http.StatusCreated {
		t.Errorf("the unscoped token leasing in a: %d %s", r.status, r.body)
	}
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e wire.Error
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	return e.Error
}
