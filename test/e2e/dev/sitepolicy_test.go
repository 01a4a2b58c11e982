package deve2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// sitePolicy: a SitePolicy bounds the leases for its site over the whole
// fleet, through both doors (the HTTP API's 409 names it, as does the
// Kubernetes API's Status); other sites are untouched; a rate_limited report
// cuts its limit, which its status, `kubectl get sitepolicies` and the
// metrics show; deleting it lifts the bound.
func (h *harness) sitePolicy(t *testing.T) {
	url, token := h.env.DiscoveryURL, h.env.DiscoveryToken
	const name, site = "dev-e2e-site", "budget.dev-e2e.test"
	h.mustKubectlIn(t, `{"apiVersion":"crawl.example.com/v1alpha1","kind":"SitePolicy","metadata":{"name":"`+name+`"},`+
		`"spec":{"sites":["`+site+`"],"maxConcurrency":2,"decreasePercent":50,"increaseIntervalSeconds":3600}}`, "create", "-f", "-")
	defer h.mustKubectl(t, "delete", "sitepolicy", name, "--ignore-not-found")
	waitFor := func(what, jsonpath, want string) {
		t.Helper()
		h.waitForSitePolicy(t, name, what, jsonpath, want)
	}
	waitFor("the policy applied", `{.status.conditions[?(@.type=="Applied")].status} {.status.limit}`, "True 2")

	lease := func(target string) (int, string) {
		return h.curl(t, token, "-d", `{"target":"`+target+`","ttlSeconds":60}`, url+"/v1/leases")
	}
	var held []wireLease
	for range 2 {
		code, body := lease(site)
		var l wireLease
		if code != 201 || json.Unmarshal([]byte(body), &l) != nil {
			t.Fatalf("a lease for the site within its budget: HTTP %d %s", code, body)
		}
		held = append(held, l)
	}
	defer func() {
		for _, l := range held {
			h.curlNoFatal(token, "-X", "DELETE", url+"/v1/leases/"+l.LeaseID)
		}
	}()
	if code, body := lease(site); code != 409 || !strings.Contains(body, `"sitePolicy":"`+name+`"`) {
		t.Fatalf("a third lease for the site: HTTP %d %s, want 409 naming SitePolicy %s", code, body, name)
	}
	if code, body := lease("another.dev-e2e.test"); code != 201 {
		t.Fatalf("a lease for another site: HTTP %d %s", code, body)
	} else {
		var l wireLease
		_ = json.Unmarshal([]byte(body), &l)
		held = append(held, l)
	}
	manifest := `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease","metadata":{"generateName":"dev-e2e-site-"},` +
		`"spec":{"target":"` + site + `","ttlSeconds":60}}`
	if out, err := h.runKubectl(manifest, "create", "-f", "-"); err == nil || !strings.Contains(out+err.Error(), `SitePolicy "`+name+`"`) {
		t.Fatalf("a ProxyLease for the site over its budget: %v %s, want refused naming SitePolicy %s", err, out, name)
	}

	// A rate_limited report cuts 2 to 1 (and it stays cut: the interval
	// before a raise is an hour here): shown in the status and the metrics.
	if code, body := h.curl(t, token, "-d", `{"result":"rate_limited","target":"`+site+`"}`, url+"/v1/leases/"+held[0].LeaseID+"/report"); code != 204 && code != 200 {
		t.Fatalf("report: HTTP %d %s", code, body)
	}
	waitFor("the cut", `{.status.limit} {.status.live} {.status.cuts}`, "1 2 1")
	if table := h.mustKubectl(t, "get", "sitepolicies"); !strings.Contains(table, name) || !strings.Contains(table, site) {
		t.Errorf("kubectl get sitepolicies lacks the policy:\n%s", table)
	}
	if v := h.metric(t, h.env.MetricsURL, `proxy_operator_site_limit{policy="`+name+`"}`); v != "1" {
		t.Errorf(`proxy_operator_site_limit{policy=%q} = %q, want 1`, name, v)
	}

	// Deleted: the bound is lifted.
	h.mustKubectl(t, "delete", "sitepolicy", name)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := lease(site)
		if code == 201 {
			var l wireLease
			_ = json.Unmarshal([]byte(body), &l)
			held = append(held, l)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the policy's deletion: HTTP %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ladder: a lease asking for a ladder of tiers (standard, then premium)
// gets the standard proxy while it can serve the site; once it is reported
// banned for the site the site's leases climb to premium, through both
// doors, within the SitePolicy's budget for that tier (a second premium
// lease is refused naming the policy); the lease, the policy's status and
// the metrics say the tier.
func (h *harness) ladder(t *testing.T) {
	url, token := h.env.DiscoveryURL, h.env.DiscoveryToken
	const name, site = "dev-e2e-ladder", "ladder.dev-e2e.test"
	type tieredLease struct {
		wireLease
		Tier int `json:"tier"`
	}
	var held []string
	defer func() {
		for _, id := range held {
			h.curlNoFatal(token, "-X", "DELETE", url+"/v1/leases/"+id)
		}
	}()
	lease := func() (int, string, tieredLease) {
		code, body := h.curl(t, token, "-d", `{"selectors":[{"tier":"standard"},{"tier":"premium"}],"target":"`+site+`","ttlSeconds":60}`, url+"/v1/leases")
		var l tieredLease
		if code == 201 {
			_ = json.Unmarshal([]byte(body), &l)
			held = append(held, l.LeaseID)
		}
		return code, body, l
	}
	code, body, cheap := lease()
	if code != 201 || cheap.Tier != 0 || cheap.Proxy.Attributes["tier"] != "standard" {
		t.Fatalf("the first lease of the ladder: HTTP %d %s, want the standard proxy on tier 0", code, body)
	}
	// The site bans the standard tier: reported, released. (Before the
	// policy exists: under it the ban would also cut the site's budget,
	// which the sitePolicy subtest covers.)
	if code, body := h.curl(t, token, "-d", `{"result":"banned","target":"`+site+`"}`, url+"/v1/leases/"+cheap.LeaseID+"/report"); code != 204 && code != 200 {
		t.Fatalf("report: HTTP %d %s", code, body)
	}
	h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+cheap.LeaseID)

	h.mustKubectlIn(t, `{"apiVersion":"crawl.example.com/v1alpha1","kind":"SitePolicy","metadata":{"name":"`+name+`"},`+
		`"spec":{"sites":["`+site+`"],"maxConcurrency":4,"higherTiers":[{"maxConcurrency":1}]}}`, "create", "-f", "-")
	defer h.mustKubectl(t, "delete", "sitepolicy", name, "--ignore-not-found")
	waitFor := func(what, jsonpath, want string) {
		t.Helper()
		h.waitForSitePolicy(t, name, what, jsonpath, want)
	}
	waitFor("the policy applied", `{.status.conditions[?(@.type=="Applied")].status}`, "True")

	code, body, climbed := lease()
	if code != 201 || climbed.Tier != 1 || climbed.Proxy.Attributes["tier"] != "premium" {
		t.Fatalf("every standard proxy banned for the site: HTTP %d %s, want the premium proxy on tier 1", code, body)
	}
	if code, body, _ := lease(); code != 409 || !strings.Contains(body, `"sitePolicy":"`+name+`"`) || !strings.Contains(body, "tier 1") {
		t.Fatalf("a second lease on tier 1: HTTP %d %s, want 409 naming SitePolicy %s's tier 1", code, body, name)
	}
	manifest := `{"apiVersion":"leasing.crawl.example.com/v1alpha1","kind":"ProxyLease","metadata":{"generateName":"dev-e2e-ladder-"},` +
		`"spec":{"selectors":[{"tier":"standard"},{"tier":"premium"}],"target":"` + site + `","ttlSeconds":60}}`
	if out, err := h.runKubectl(manifest, "create", "-f", "-"); err == nil || !strings.Contains(out+err.Error(), `SitePolicy "`+name+`"`) {
		t.Fatalf("a ProxyLease on tier 1 over its budget: %v %s, want refused naming SitePolicy %s", err, out, name)
	}
	waitFor("the tier in the status", `{.status.tier} {.status.tierLive}`, "1 [0,1]")
	if v := h.metric(t, h.env.MetricsURL, `proxy_operator_site_tier{policy="`+name+`"}`); v != "1" {
		t.Errorf(`proxy_operator_site_tier{policy=%q} = %q, want 1`, name, v)
	}
	// The HTTP lease released, the ProxyLease climbs too and says so.
	h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+climbed.LeaseID)
	created := strings.TrimSpace(h.mustKubectlIn(t, manifest, "create", "-f", "-", "-o", "jsonpath={.metadata.name}"))
	defer h.mustKubectl(t, "delete", "proxylease", created, "--ignore-not-found")
	if got := h.mustKubectl(t, "get", "proxylease", created, "-o", "jsonpath={.status.tier} {.status.proxy.attributes.tier}"); got != "1 premium" {
		t.Errorf("ProxyLease %s: tier and proxy %q, want \"1 premium\"", created, got)
	}
}

// waitForSitePolicy waits up to 30 s for SitePolicy name's jsonpath to read
// want (its status is written every 5 s).
func (h *harness) waitForSitePolicy(t *testing.T, name, what, jsonpath, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	got := ""
	for time.Now().Before(deadline) {
		if got = h.mustKubectl(t, "get", "sitepolicy", name, "-o", "jsonpath="+jsonpath); got == want {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: %s = %q, want %q", what, jsonpath, got, want)
}

// proxyInterval: a SitePolicy's minProxyIntervalMillis keeps a proxy from
// being granted for its site again before the interval passes: the one
// standard proxy, leased and released for the site, is refused for it at
// once (a no match counting it as a wait brings it), while another site
// gets it.
func (h *harness) proxyInterval(t *testing.T) {
	url, token := h.env.DiscoveryURL, h.env.DiscoveryToken
	const name, site = "dev-e2e-interval", "interval.dev-e2e.test"
	h.mustKubectlIn(t, `{"apiVersion":"crawl.example.com/v1alpha1","kind":"SitePolicy","metadata":{"name":"`+name+`"},`+
		`"spec":{"sites":["`+site+`"],"maxConcurrency":4,"minProxyIntervalMillis":3600000}}`, "create", "-f", "-")
	defer h.mustKubectl(t, "delete", "sitepolicy", name, "--ignore-not-found")
	h.waitForSitePolicy(t, name, "the policy applied", `{.status.conditions[?(@.type=="Applied")].status}`, "True")
	lease := func(target string) (int, string, wireLease) {
		code, body := h.curl(t, token, "-d", `{"selector":{"tier":"standard"},"target":"`+target+`","ttlSeconds":60}`, url+"/v1/leases")
		var l wireLease
		if code == 201 {
			_ = json.Unmarshal([]byte(body), &l)
			h.curl(t, token, "-X", "DELETE", url+"/v1/leases/"+l.LeaseID)
		}
		return code, body, l
	}
	if code, body, _ := lease(site); code != 201 {
		t.Fatalf("the first lease for the site: HTTP %d %s", code, body)
	}
	if code, body, _ := lease(site); code != 409 || !strings.Contains(body, `"atCapacity":1`) {
		t.Fatalf("the standard proxy again for the site within the interval: HTTP %d %s, want 409 with it at capacity", code, body)
	}
	if code, body, l := lease("other." + site); code != 201 || l.Proxy.Attributes["tier"] != "standard" {
		t.Fatalf("the standard proxy for another site: HTTP %d %s", code, body)
	}
}
