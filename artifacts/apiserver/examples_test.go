package apiserver_test

import (
	"io/fs"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/artifacts/apiserver"
	"github.com/proxy-operator/proxy-operator/artifacts/examples"
)

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Selector   map[string]string `json:"selector"`
		Attributes map[string]string `json:"attributes"`
	} `json:"spec"`
}

func decodeAll(t *testing.T, fsys fs.FS, pattern string) []object {
	t.Helper()
	files, err := fs.Glob(fsys, pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no files match %s: %v", pattern, err)
	}
	var out []object
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			var o object
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("decoding %s: %v", f, err)
			}
			if o.Kind != "" {
				out = append(out, o)
			}
		}
	}
	return out
}

func matches(selector, attributes map[string]string) bool {
	for k, v := range selector {
		if attributes[k] != v {
			return false
		}
	}
	return true
}

// The example leases are what a newcomer runs against make dev first: each
// must select at least one Proxy of the sample fleet, or its first try is a
// 409 (it happened once: the example selected region=eu, which nothing had).
func TestExampleLeasesSelectASampleProxy(t *testing.T) {
	var proxies []object
	for _, o := range decodeAll(t, examples.Fleet, "fleet/*.yaml") {
		if o.Kind == "Proxy" {
			proxies = append(proxies, o)
		}
	}
	if len(proxies) == 0 {
		t.Fatal("the sample fleet has no Proxy")
	}
	leases := 0
	for _, l := range decodeAll(t, apiserver.Examples, "examples/*.yaml") {
		if l.Kind != "ProxyLease" {
			continue
		}
		leases++
		var names []string
		for _, p := range proxies {
			if matches(l.Spec.Selector, p.Spec.Attributes) {
				names = append(names, p.Metadata.Name)
			}
		}
		if len(names) == 0 {
			t.Errorf("example ProxyLease with selector %v matches no Proxy of the sample fleet", l.Spec.Selector)
		}
	}
	if leases == 0 {
		t.Fatal("no example ProxyLease found")
	}
	// Negative control: a selector nothing carries matches nothing.
	for _, p := range proxies {
		if matches(map[string]string{"region": "nowhere"}, p.Spec.Attributes) {
			t.Errorf("control selector matched %s", p.Metadata.Name)
		}
	}
}
