package sites

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func policy(name string, sites ...string) Policy {
	return Policy{Name: name, Sites: sites, MinConcurrency: 1, MaxConcurrency: 4,
		IncreaseInterval: DefaultIncreaseInterval, DecreaseFactor: DefaultDecreaseFactor}
}

// TestTableFor: a host goes to the policy that names it, else to the
// wildcard of its nearest parent; a wildcard does not cover its own domain;
// targets are read as hosts (URL, host:port, case, trailing dot); a site two
// policies name is the first's by name, and the other says so; an invalid
// policy covers nothing and says why.
func TestTableFor(t *testing.T) {
	bad := policy("bad", "Example.ORG")
	tab := NewTable([]Policy{
		policy("shop", "shop.example.com"),
		policy("example", "*.example.com", "example.net"),
		policy("deep", "*.a.example.com"),
		policy("another", "example.net"),
		bad,
	})
	for target, want := range map[string]string{
		"shop.example.com":               "shop",
		"www.example.com":                "example",
		"x.a.example.com":                "deep",
		"a.example.com":                  "example",
		"example.com":                    "",
		"example.net":                    "another",
		"https://WWW.Example.com:8443/p": "example",
		"www.example.com.":               "example",
		"[::1]:443":                      "",
		"":                               "",
		"example.org":                    "",
		"notexample.com":                 "",
	} {
		got := ""
		if b := tab.For(target); b != nil {
			got = b.Policy().Name
		}
		if got != want {
			t.Errorf("For(%q) = %q, want %q", target, got, want)
		}
	}
	want := map[string]string{
		"example": `site "example.net" is already SitePolicy "another"'s`,
		"bad":     `site policy "bad": site "Example.ORG": want lowercase`,
	}
	if d := cmp.Diff(want, tab.Conflicts); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
}

func TestPolicyValidate(t *testing.T) {
	for name, mutate := range map[string]func(*Policy){
		"no sites":            func(p *Policy) { p.Sites = nil },
		"floor 0":             func(p *Policy) { p.MinConcurrency = 0 },
		"ceiling under floor": func(p *Policy) { p.MaxConcurrency = 0 },
		"negative rate":       func(p *Policy) { p.MaxGrantsPerSecond = -1 },
		"no interval":         func(p *Policy) { p.IncreaseInterval = 0 },
		"factor 1":            func(p *Policy) { p.DecreaseFactor = 1 },
		"wildcard inside":     func(p *Policy) { p.Sites = []string{"a.*.com"} },
		"port":                func(p *Policy) { p.Sites = []string{"a.com:443"} },
		"scheme":              func(p *Policy) { p.Sites = []string{"https://a.com"} },
		"bare wildcard":       func(p *Policy) { p.Sites = []string{"*."} },
		"tier over ceiling":   func(p *Policy) { p.HigherTiers = []int{5} },
		"negative tier":       func(p *Policy) { p.HigherTiers = []int{-1} },
		"four higher tiers":   func(p *Policy) { p.HigherTiers = []int{1, 1, 1, 1} },
	} {
		p := policy("p", "example.com")
		p.HigherTiers = []int{4, 0, 1}
		if err := p.Validate(); err != nil {
			t.Fatalf("the valid policy: %v", err)
		}
		mutate(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
