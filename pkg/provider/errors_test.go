package provider_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

func TestClass(t *testing.T) {
	cause := errors.New("boom")
	type verdict struct {
		Class                                              error
		Name                                               string
		NotFound, QuotaExceeded, Permanent, Transient, Has bool
	}
	tests := []struct {
		name string
		err  error
		want verdict
	}{
		{"nil", nil, verdict{}},
		{"unclassified defaults to transient", cause,
			verdict{Class: provider.ErrTransient, Name: "transient", Transient: true}},
		{"context deadline is transient", context.DeadlineExceeded,
			verdict{Class: provider.ErrTransient, Name: "transient", Transient: true}},
		{"NotFound", provider.NotFound(cause),
			verdict{Class: provider.ErrNotFound, Name: "not_found", NotFound: true, Has: true}},
		{"QuotaExceeded", provider.QuotaExceeded(cause),
			verdict{Class: provider.ErrQuotaExceeded, Name: "quota_exceeded", QuotaExceeded: true, Has: true}},
		{"Permanent", provider.Permanent(cause),
			verdict{Class: provider.ErrPermanent, Name: "permanent", Permanent: true, Has: true}},
		{"Transient", provider.Transient(cause),
			verdict{Class: provider.ErrTransient, Name: "transient", Transient: true, Has: true}},
		{"nil cause still classified", provider.NotFound(nil),
			verdict{Class: provider.ErrNotFound, Name: "not_found", NotFound: true, Has: true}},
		{"wrapped *Error", fmt.Errorf("getting pod: %w", provider.QuotaExceeded(cause)),
			verdict{Class: provider.ErrQuotaExceeded, Name: "quota_exceeded", QuotaExceeded: true, Has: true}},
		{"wrapped sentinel", fmt.Errorf("insert: %w", provider.ErrPermanent),
			verdict{Class: provider.ErrPermanent, Name: "permanent", Permanent: true, Has: true}},
		{"bare sentinel", provider.ErrNotFound,
			verdict{Class: provider.ErrNotFound, Name: "not_found", NotFound: true, Has: true}},
		{"outermost class wins", provider.Permanent(provider.NotFound(cause)),
			verdict{Class: provider.ErrPermanent, Name: "permanent", Permanent: true, Has: true}},
		{"unknown class in NewError becomes transient", provider.NewError(errors.New("weird"), provider.OpGet, cause),
			verdict{Class: provider.ErrTransient, Name: "transient", Transient: true, Has: true}},
		{"hand-made *Error with unknown class falls back to its cause", &provider.Error{Class: cause, Err: provider.ErrQuotaExceeded},
			verdict{Class: provider.ErrQuotaExceeded, Name: "quota_exceeded", QuotaExceeded: true, Has: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := verdict{
				Class:         provider.Class(tc.err),
				Name:          provider.ClassName(tc.err),
				NotFound:      provider.IsNotFound(tc.err),
				QuotaExceeded: provider.IsQuotaExceeded(tc.err),
				Permanent:     provider.IsPermanent(tc.err),
				Transient:     provider.IsTransient(tc.err),
				Has:           provider.IsClassified(tc.err),
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorWrapsAndFormats(t *testing.T) {
	cause := errors.New("googleapi: Error 403: quota")
	err := provider.NewError(provider.ErrQuotaExceeded, provider.OpCreate, cause)

	if !errors.Is(err, provider.ErrQuotaExceeded) {
		t.Errorf("errors.Is(err, ErrQuotaExceeded) = false, want true")
	}
	if errors.Is(err, provider.ErrPermanent) {
		t.Errorf("errors.Is(err, ErrPermanent) = true, want false")
	}
	if !errors.Is(err, cause) {
		t.Errorf("errors.Is(err, cause) = false: the cause must stay reachable")
	}
	var pe *provider.Error
	if !errors.As(fmt.Errorf("outer: %w", err), &pe) {
		t.Fatalf("errors.As(*provider.Error) = false")
	}
	if pe.Class != provider.ErrQuotaExceeded || pe.Op != provider.OpCreate || pe.Err != cause {
		t.Errorf("*Error = {Class: %v, Op: %q, Err: %v}, want {quota exceeded, create, the cause}", pe.Class, pe.Op, pe.Err)
	}

	msgs := []struct {
		err  error
		want string
	}{
		{err, "create: quota exceeded: googleapi: Error 403: quota"},
		{provider.NotFound(errors.New(`pod "x"`)), `instance not found: pod "x"`},
		{provider.Permanent(nil), "permanent failure"},
		{provider.NewError(provider.ErrTransient, provider.OpList, nil), "list: transient failure"},
	}
	for _, m := range msgs {
		if got := m.err.Error(); got != m.want {
			t.Errorf("Error() = %q, want %q", got, m.want)
		}
	}
}

func TestIncompleteListing(t *testing.T) {
	err := provider.Incomplete([]string{"projects/p/zones/b", "projects/p/zones/a", "projects/p/zones/b"})
	got, ok := provider.UnreachableScopes(err)
	if !ok || !provider.IsIncompleteList(err) {
		t.Fatalf("UnreachableScopes(%v) = (%v, %v), want the scopes and true", err, got, ok)
	}
	if diff := cmp.Diff([]string{"projects/p/zones/a", "projects/p/zones/b"}, got); diff != "" {
		t.Errorf("scopes, sorted and deduplicated (-want +got):\n%s", diff)
	}
	// A partial listing is worth retrying, and says which op it was.
	if !provider.IsTransient(err) || !strings.HasPrefix(err.Error(), "list: ") {
		t.Errorf("class/message of %q: want transient, op list", err)
	}
	// Wrapping keeps it visible; other errors are not incomplete listings.
	if _, ok := provider.UnreachableScopes(fmt.Errorf("sweep: %w", err)); !ok {
		t.Error("a wrapped incomplete listing is not recognised")
	}
	for _, other := range []error{nil, provider.Transient(errors.New("503")), provider.NotFound(nil)} {
		if s, ok := provider.UnreachableScopes(other); ok || s != nil {
			t.Errorf("UnreachableScopes(%v) = (%v, true), want (nil, false)", other, s)
		}
	}
	// The caller's copy is its own.
	got[0] = "changed"
	if again, _ := provider.UnreachableScopes(err); again[0] != "projects/p/zones/a" {
		t.Error("UnreachableScopes returned the error's own slice")
	}
}
