package leasing

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// The report results are one list (lease.Results); the two APIs' enums, which
// cannot import it (apis/ imports nothing of pkg/, wire only the standard
// library), are held to it here.
func TestReportResultsAreOneList(t *testing.T) {
	apiEnum := []string{string(leasingv1alpha1.ResultOK), string(leasingv1alpha1.ResultRateLimited), string(leasingv1alpha1.ResultBanned)}
	wireEnum := []string{wire.ResultOK, wire.ResultRateLimited, wire.ResultBanned}
	if d := cmp.Diff(lease.Results(), apiEnum); d != "" {
		t.Errorf("ProxyLeaseReport results (-server +api):\n%s", d)
	}
	if d := cmp.Diff(lease.Results(), wireEnum); d != "" {
		t.Errorf("HTTP API results (-server +wire):\n%s", d)
	}
	for _, r := range lease.Results() {
		if !lease.ValidResult(r) {
			t.Errorf("%q is listed but not valid", r)
		}
	}
	if lease.ValidResult("") || lease.ValidResult("OK") {
		t.Error("a result outside the list is valid")
	}
}

// One set of request limits: Validate names the field of each broken rule,
// relative to the request, and takes what the ProxyLease API takes.
func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want []string // the fields named
	}{
		{"empty request", Request{}, nil},
		{"everything at its limit", Request{Namespace: strings.Repeat("n", 63), Target: strings.Repeat("t", 253),
			Selector: map[string]string{strings.Repeat("k", 253): strings.Repeat("v", 253)}}, nil},
		{"namespace not a DNS label", Request{Namespace: "Team_A"}, []string{"namespace"}},
		{"target over 253 bytes", Request{Target: strings.Repeat("t", 254)}, []string{"target"}},
		{"target with a space", Request{Target: "a b"}, []string{"target"}},
		{"target with a control character", Request{Target: "a\x00b"}, []string{"target"}},
		{"target not UTF-8", Request{Target: "a\xffb"}, []string{"target"}},
		{"empty selector key", Request{Selector: map[string]string{"": "x"}}, []string{"selector"}},
		{"selector value over 253 bytes", Request{Selector: map[string]string{"k": strings.Repeat("v", 254)}}, []string{"selector[k]"}},
		{"selector value with a newline", Request{Selector: map[string]string{"k": "a\nb"}}, []string{"selector[k]"}},
		{"two broken fields", Request{Namespace: "-", Target: "a b"}, []string{"namespace", "target"}},
		{"a ladder", Request{Selectors: []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}}, nil},
		{"a ladder and a selector", Request{Selector: map[string]string{"a": "b"}, Selectors: []map[string]string{{}}}, []string{"selectors"}},
		{"five tiers", Request{Selectors: make([]map[string]string, 5)}, []string{"selectors"}},
		{"a broken tier", Request{Selectors: []map[string]string{{}, {"k": "a\nb"}}}, []string{"selectors[1][k]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range tc.req.Validate() {
				got = append(got, e.Field)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
	many := map[string]string{}
	for i := range leasingv1alpha1.MaxSelectorEntries + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if errs := (Request{Selector: many}).Validate(); len(errs) != 1 || errs[0].Field != "selector" {
		t.Errorf("33 selector pairs: %v", errs)
	}
}

// No Kubernetes user shares an HTTP token's holder or flows, and no two
// users share one (#26 item 5): on the code before, the user
// "http:crawler-a" held and queued as the token of identity crawler-a.
func TestKubernetesAndHTTPIdentitiesNeverCollide(t *testing.T) {
	owners := map[string]string{}
	claim := func(who string, id Identity) {
		t.Helper()
		for _, key := range []string{id.Holder, id.Flow} {
			if prev, ok := owners[key]; ok && prev != who {
				t.Errorf("%s and %s share %q", prev, who, key)
			}
			owners[key] = who
		}
	}
	for _, tok := range []string{"crawler-a", "alice"} {
		claim("token "+tok, HTTPIdentity(tok, ""))
		claim("token "+tok, HTTPIdentity(tok, "batch"))
	}
	for _, user := range []string{"http:crawler-a", "http:crawler-a/batch", "kubernetes:http:crawler-a", "kubernetes:kubernetes:http:crawler-a",
		"alice", "kubernetes:alice", "system:serviceaccount:crawl:bot"} {
		claim("user "+user, KubernetesIdentity(user))
	}
	if got := KubernetesIdentity("alice"); got.Holder != "alice" {
		t.Errorf("an ordinary user's holder is %q, want the user name", got.Holder)
	}
}

// A ladder is its own queue class, apart from its first tier alone and from
// the same selectors in another order; keys never collide by concatenation.
func TestClassKeyOfLadders(t *testing.T) {
	reqs := map[string]lease.AcquireRequest{
		"selector":          {Target: "s", Selector: map[string]string{"tier": "cheap"}},
		"ladder":            {Target: "s", Selectors: []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}},
		"ladder reversed":   {Target: "s", Selectors: []map[string]string{{"tier": "premium"}, {"tier": "cheap"}}},
		"one tier":          {Target: "s", Selectors: []map[string]string{{"tier": "cheap"}}},
		"empty first tier":  {Target: "s", Selectors: []map[string]string{{}, {"tier": "cheap"}}},
		"pairs in one tier": {Target: "s", Selectors: []map[string]string{{"tier": "cheap", "zone": "x"}}},
		"pairs in two":      {Target: "s", Selectors: []map[string]string{{"tier": "cheap"}, {"zone": "x"}}},
		"other target":      {Target: "t", Selectors: []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}},
	}
	seen := map[string]string{}
	for name, r := range reqs {
		k := classKey(r)
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s share the class %q", name, other, k)
		}
		seen[k] = name
	}
	same := lease.AcquireRequest{Target: "s", Selectors: []map[string]string{{"tier": "cheap"}, {"tier": "premium"}}}
	if classKey(same) != classKey(reqs["ladder"]) {
		t.Error("the same ladder is two classes")
	}
}
