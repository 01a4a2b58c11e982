package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Constructor builds one provider. The context bounds construction (client
// creation, credential lookup); it is not kept by the provider.
type Constructor func(ctx context.Context) (Provider, error)

// Wrapper decorates a constructed provider, e.g. with WithMetrics.
type Wrapper func(name string, p Provider) Provider

// Registry holds the enabled providers by name. It is immutable once built and
// safe for concurrent use.
//
// The constructor map is a parameter rather than a package-level map filled by
// init(): implementations import this package, so a map here that named them
// would be an import cycle, and the wiring belongs to the composition root
// (cmd), where it is visible.
type Registry struct {
	providers map[string]Provider
	names     []string
}

// NewRegistry constructs each provider named in enabled with its constructor
// from constructors, then applies the wrappers in order (the last one is
// outermost). It fails, constructing nothing further, on an empty or
// duplicate name, a name with no constructor (the error lists the known
// names), a constructor error or a constructor that returns no provider.
// An empty enabled list is a valid, empty registry.
func NewRegistry(ctx context.Context, enabled []string, constructors map[string]Constructor, wrap ...Wrapper) (*Registry, error) {
	r := &Registry{providers: make(map[string]Provider, len(enabled))}
	for _, name := range enabled {
		if name == "" {
			return nil, errors.New("enabled providers: empty provider name")
		}
		if _, dup := r.providers[name]; dup {
			return nil, fmt.Errorf("enabled providers: %q listed twice", name)
		}
		construct := constructors[name]
		if construct == nil {
			return nil, fmt.Errorf("unknown provider %q (known: %s)", name, knownNames(constructors))
		}
		p, err := construct(ctx)
		if err != nil {
			return nil, fmt.Errorf("constructing provider %q: %w", name, err)
		}
		if p == nil {
			return nil, fmt.Errorf("constructing provider %q: constructor returned no provider", name)
		}
		for _, w := range wrap {
			if w != nil {
				p = w(name, p)
			}
		}
		r.providers[name] = p
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	return r, nil
}

func knownNames(constructors map[string]Constructor) string {
	var names []string
	for name, c := range constructors {
		if c != nil {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Get returns the provider registered under name.
func (r *Registry) Get(name string) (Provider, bool) {
	if r == nil {
		return nil, false
	}
	p, ok := r.providers[name]
	return p, ok
}

// Names returns the registered names, sorted. The slice is the caller's.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.names)
}

// All returns a copy of the name → provider map, for callers that visit every
// provider (garbage collection).
func (r *Registry) All() map[string]Provider {
	if r == nil {
		return nil
	}
	return maps.Clone(r.providers)
}
