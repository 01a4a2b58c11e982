package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/fake"
)

type ctxKey struct{}

// named is a Provider decorator that remembers the wrapper chain, so the test
// can see which wrappers ran, with which name, in which order.
type named struct {
	provider.Provider
	chain []string
}

func wrapper(label string) provider.Wrapper {
	return func(name string, p provider.Provider) provider.Provider {
		var chain []string
		if n, ok := p.(*named); ok {
			chain = n.chain
		}
		return &named{Provider: p, chain: append(append([]string(nil), chain...), label+"("+name+")")}
	}
}

func TestNewRegistry(t *testing.T) {
	ok := func(ctx context.Context) (provider.Provider, error) {
		if ctx.Value(ctxKey{}) != "wired" {
			return nil, errors.New("constructor did not get the caller's context")
		}
		return fake.New(), nil
	}
	constructors := map[string]provider.Constructor{
		"kubernetes": ok,
		"gcp":        ok,
		"broken":     func(context.Context) (provider.Provider, error) { return nil, errors.New("no credentials") },
		"nil":        func(context.Context) (provider.Provider, error) { return nil, nil },
		"unset":      nil,
	}
	tests := []struct {
		name      string
		enabled   []string
		wantNames []string
		wantErr   []string // substrings of the error; nil = success
	}{
		{"empty is valid", nil, []string{}, nil},
		{"two providers, names sorted", []string{"kubernetes", "gcp"}, []string{"gcp", "kubernetes"}, nil},
		{"unknown lists known names", []string{"aws"}, nil,
			[]string{`unknown provider "aws"`, "broken, gcp, kubernetes, nil"}},
		{"nil constructor counts as unknown", []string{"unset"}, nil, []string{`unknown provider "unset"`}},
		{"constructor error names the provider", []string{"gcp", "broken"}, nil,
			[]string{`constructing provider "broken"`, "no credentials"}},
		{"nil provider", []string{"nil"}, nil, []string{`constructing provider "nil"`, "no provider"}},
		{"duplicate", []string{"gcp", "gcp"}, nil, []string{`"gcp" listed twice`}},
		{"empty name", []string{""}, nil, []string{"empty provider name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.WithValue(t.Context(), ctxKey{}, "wired")
			r, err := provider.NewRegistry(ctx, tc.enabled, constructors)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("NewRegistry(%q) = nil error, want one containing %q", tc.enabled, tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("NewRegistry(%q) error %q does not contain %q", tc.enabled, err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("NewRegistry(%q): %v", tc.enabled, err)
			}
			got := r.Names()
			if got == nil {
				got = []string{}
			}
			if diff := cmp.Diff(tc.wantNames, got); diff != "" {
				t.Errorf("Names() (-want +got):\n%s", diff)
			}
			for _, n := range tc.wantNames {
				if p, ok := r.Get(n); !ok || p == nil {
					t.Errorf("Get(%q) = (%v, %v), want the provider", n, p, ok)
				}
			}
			if p, ok := r.Get("aws"); ok || p != nil {
				t.Errorf("Get(unknown) = (%v, %v), want (nil, false)", p, ok)
			}
			if len(r.All()) != len(tc.wantNames) {
				t.Errorf("All() has %d providers, want %d", len(r.All()), len(tc.wantNames))
			}
		})
	}
}

func TestNewRegistryConstructorErrorIsWrapped(t *testing.T) {
	sentinel := provider.Permanent(errors.New("bad config"))
	_, err := provider.NewRegistry(t.Context(), []string{"x"}, map[string]provider.Constructor{
		"x": func(context.Context) (provider.Provider, error) { return nil, sentinel },
	})
	if !errors.Is(err, sentinel) {
		t.Errorf("NewRegistry error %v does not wrap the constructor's error", err)
	}
}

func TestNewRegistryAppliesWrappersInOrder(t *testing.T) {
	constructors := map[string]provider.Constructor{
		"kubernetes": func(context.Context) (provider.Provider, error) { return fake.New(), nil },
	}
	r, err := provider.NewRegistry(t.Context(), []string{"kubernetes"}, constructors, wrapper("a"), nil, wrapper("b"))
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	p, _ := r.Get("kubernetes")
	n, ok := p.(*named)
	if !ok {
		t.Fatalf("Get returned %T, want the outermost wrapper", p)
	}
	if diff := cmp.Diff([]string{"a(kubernetes)", "b(kubernetes)"}, n.chain); diff != "" {
		t.Errorf("wrapper chain (-want +got):\n%s", diff)
	}
}

func TestRegistryNamesIsACopy(t *testing.T) {
	constructors := map[string]provider.Constructor{
		"a": func(context.Context) (provider.Provider, error) { return fake.New(), nil },
	}
	r, err := provider.NewRegistry(t.Context(), []string{"a"}, constructors)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	r.Names()[0] = "mutated"
	delete(r.All(), "a")
	if diff := cmp.Diff([]string{"a"}, r.Names()); diff != "" {
		t.Errorf("Names() after mutating a returned copy (-want +got):\n%s", diff)
	}
	if _, ok := r.Get("a"); !ok {
		t.Errorf("Get(a) after deleting from All()'s copy = false")
	}
}
