package providertest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// The contract cases, one function each (cases() lists them).

// createThenGet: Create returns a providerID and Get finds that instance with
// the request's identity, in a state a fresh instance can be in.
func createThenGet(s *suite) {
	req := s.newRequest(newTag())
	id := s.create(req)
	inst, err := s.p.Get(s.ctx(), id)
	if err != nil {
		s.t.Fatalf("Get(%q) right after Create: %v", id, err)
	}
	want := provider.Instance{ProviderID: id, Name: req.Name, Tag: req.Tag, OwnerUID: req.OwnerUID, SpecHash: req.SpecHash}
	if diff := cmp.Diff(want, *inst, identityOnly); diff != "" {
		s.t.Errorf("Get(%q) identity (-want +got):\n%s", id, diff)
	}
	if inst.State != provider.StateProvisioning && inst.State != provider.StateRunning {
		s.t.Errorf("Get(%q) of a new instance: state %q, want Provisioning or Running", id, inst.State)
	}
}

// identityOnly compares the fields a provider must echo from the request.
var identityOnly = cmpopts.IgnoreFields(provider.Instance{}, "State", "IP", "CreatedAt", "Scope")

// createIsIdempotent: a second Create of the same name, even with another tag
// and owner, returns the same providerID and leaves one, unmodified instance.
func createIsIdempotent(s *suite) {
	tag := newTag()
	req := s.newRequest(tag)
	first := s.create(req)
	second := s.create(req)
	if first != second {
		s.t.Errorf("Create twice with name %q: providerIDs %q then %q, want equal", req.Name, first, second)
	}

	other := s.newRequest(newTag())
	other.Name = req.Name
	third := s.create(other)
	if third != first {
		s.t.Errorf("Create of existing name %q under another tag and owner: providerID %q, want %q", req.Name, third, first)
	}

	if diff := cmp.Diff([]string{req.Name}, names(s.list(tag))); diff != "" {
		s.t.Errorf("ListByTag(%q) after repeated Create (-want +got):\n%s", tag, diff)
	}
	if got := s.list(other.Tag); len(got) != 0 {
		s.t.Errorf("ListByTag(%q) = %v: a repeated Create modified the existing instance's tag", other.Tag, names(got))
	}
	inst, err := s.p.Get(s.ctx(), first)
	if err != nil {
		s.t.Fatalf("Get(%q): %v", first, err)
	}
	if inst.OwnerUID != req.OwnerUID || inst.SpecHash != req.SpecHash {
		s.t.Errorf("owner and spec hash after repeated Create = %q, %q; want the first request's %q, %q (Create never modifies an existing instance)",
			inst.OwnerUID, inst.SpecHash, req.OwnerUID, req.SpecHash)
	}
}

// concurrentCreateIsIdempotent: racing Creates of one name all succeed with one
// providerID (the "already exists" path of a real backend).
func concurrentCreateIsIdempotent(s *suite) {
	const n = 4
	tag := newTag()
	req := s.newRequest(tag)
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i], errs[i] = s.p.Create(s.ctx(), req) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			s.t.Errorf("concurrent Create #%d of %q: %v", i, req.Name, errs[i])
		}
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(ids))); len(distinct) != 1 {
		s.t.Errorf("concurrent Creates of %q returned providerIDs %q, want one", req.Name, ids)
	}
	if diff := cmp.Diff([]string{req.Name}, names(s.list(tag))); diff != "" {
		s.t.Errorf("ListByTag(%q) after concurrent Creates (-want +got):\n%s", tag, diff)
	}
}

// createRejectsInvalidRequest: a request that cannot succeed is ErrPermanent
// and creates nothing.
func createRejectsInvalidRequest(s *suite) {
	tag := newTag()
	tests := []struct {
		name   string
		mutate func(r *provider.CreateRequest)
	}{
		{"empty name", func(r *provider.CreateRequest) { r.Name = "" }},
		{"uppercase name", func(r *provider.CreateRequest) { r.Name = "Proxy-ABC" }},
		{"name starting with a digit", func(r *provider.CreateRequest) { r.Name = "1proxy" }},
		{"name over 63 characters", func(r *provider.CreateRequest) { r.Name = "p" + fmt.Sprintf("%063d", 0) }},
		{"empty tag", func(r *provider.CreateRequest) { r.Tag = "" }},
		{"empty owner", func(r *provider.CreateRequest) { r.OwnerUID = "" }},
	}
	for _, tc := range tests {
		req := s.newRequest(tag)
		tc.mutate(&req)
		id, err := s.p.Create(s.ctx(), req)
		if !provider.IsPermanent(err) {
			s.t.Errorf("Create with %s: (%q, %v), want an ErrPermanent-class error", tc.name, id, err)
		}
	}
	if got := s.list(tag); len(got) != 0 {
		s.t.Errorf("ListByTag(%q) after invalid Creates = %v, want none", tag, names(got))
	}
}

// reachesRunning: a created instance becomes Running with an IP, passing only
// through Provisioning.
func reachesRunning(s *suite) {
	req := s.newRequest(newTag())
	id := s.create(req)
	if s.h.MakeRunning != nil {
		s.h.MakeRunning(s.ctx(), s.t, s.p, id)
	}
	var last *provider.Instance
	s.poll("instance "+id+" to be Running", func(ctx context.Context) (bool, error) {
		inst, err := s.p.Get(ctx, id)
		if err != nil {
			if provider.IsTransient(err) {
				return false, nil
			}
			return false, fmt.Errorf("Get(%q): %w", id, err)
		}
		last = inst
		switch inst.State {
		case provider.StateRunning:
			return true, nil
		case provider.StateProvisioning:
			return false, nil
		default:
			return false, fmt.Errorf("new instance %q went %s before Running", id, inst.State)
		}
	})
	if last == nil || last.IP == "" {
		s.t.Errorf("Running instance %q has no IP: %+v", id, last)
	}
}

// neverIssued is a providerID no provider issues.
func neverIssued(name string) string { return "providertest://never-issued/" + name }

// getMissingIsNotFound: Get of an instance that does not exist is NotFound.
func getMissingIsNotFound(s *suite) {
	name := provider.NameFromUID(uuid.NewUUID())
	ids := []string{neverIssued(name)}
	if s.h.MissingID != nil {
		ids = append(ids, s.h.MissingID(name))
	}
	for _, id := range ids {
		inst, err := s.p.Get(s.ctx(), id)
		if !provider.IsNotFound(err) {
			s.t.Errorf("Get(%q) of a missing instance: (%+v, %v), want an ErrNotFound-class error", id, inst, err)
		}
	}
}

// deleteMissingSucceeds: Delete of a missing instance, and a second Delete of
// one being deleted, return nil.
func deleteMissingSucceeds(s *suite) {
	name := provider.NameFromUID(uuid.NewUUID())
	ids := []string{neverIssued(name)}
	if s.h.MissingID != nil {
		ids = append(ids, s.h.MissingID(name))
	}
	for _, id := range ids {
		if err := s.p.Delete(s.ctx(), id); err != nil {
			s.t.Errorf("Delete(%q) of a missing instance: %v, want nil", id, err)
		}
	}
	id := s.create(s.newRequest(newTag()))
	for i := range 2 {
		if err := s.p.Delete(s.ctx(), id); err != nil {
			s.t.Errorf("Delete #%d of %q: %v, want nil", i+1, id, err)
		}
	}
}

// deleteThenGetNotFound: after Delete, Get turns NotFound within the timeout,
// ListByTag stops listing the instance, and Delete stays a success.
func deleteThenGetNotFound(s *suite) {
	tag := newTag()
	req := s.newRequest(tag)
	id := s.create(req)
	if err := s.p.Delete(s.ctx(), id); err != nil {
		s.t.Fatalf("Delete(%q): %v", id, err)
	}
	s.poll("Get("+id+") to be NotFound after Delete", func(ctx context.Context) (bool, error) {
		_, err := s.p.Get(ctx, id)
		switch {
		case err == nil, provider.IsTransient(err):
			return false, nil
		case provider.IsNotFound(err):
			return true, nil
		default:
			return false, fmt.Errorf("Get(%q): %w", id, err)
		}
	})
	s.poll("ListByTag("+tag+") to drop the deleted instance", func(ctx context.Context) (bool, error) {
		insts, err := s.p.ListByTag(ctx, tag)
		if err != nil {
			return false, nil
		}
		return len(insts) == 0, nil
	})
	if err := s.p.Delete(s.ctx(), id); err != nil {
		s.t.Errorf("Delete(%q) of a deleted instance: %v, want nil", id, err)
	}
}

// listByTagFiltersByTag: ListByTag returns exactly the instances of its tag.
func listByTagFiltersByTag(s *suite) {
	tagA, tagB := newTag(), newTag()
	var wantA, wantB []string
	for range 2 {
		req := s.newRequest(tagA)
		s.create(req)
		wantA = append(wantA, req.Name)
	}
	reqB := s.newRequest(tagB)
	s.create(reqB)
	wantB = append(wantB, reqB.Name)
	sort.Strings(wantA)

	if diff := cmp.Diff(wantA, names(s.list(tagA))); diff != "" {
		s.t.Errorf("ListByTag(%q) (-want +got):\n%s", tagA, diff)
	}
	if diff := cmp.Diff(wantB, names(s.list(tagB))); diff != "" {
		s.t.Errorf("ListByTag(%q) (-want +got):\n%s", tagB, diff)
	}
	unused := newTag()
	insts, err := s.p.ListByTag(s.ctx(), unused)
	if err != nil || len(insts) != 0 {
		s.t.Errorf("ListByTag(%q) of an unused tag = (%v, %v), want no instances and nil", unused, names(insts), err)
	}
}

// listByTagCarriesOwner: listed instances carry the identity of their request,
// the owner UID above all (garbage collection's ownership proof).
func listByTagCarriesOwner(s *suite) {
	tag := newTag()
	want := map[string]provider.Instance{}
	for range 2 {
		req := s.newRequest(tag)
		id := s.create(req)
		want[req.Name] = provider.Instance{ProviderID: id, Name: req.Name, Tag: tag, OwnerUID: req.OwnerUID, SpecHash: req.SpecHash}
	}
	got := map[string]provider.Instance{}
	for _, inst := range s.list(tag) {
		got[inst.Name] = inst
	}
	if diff := cmp.Diff(want, got, identityOnly); diff != "" {
		s.t.Errorf("ListByTag(%q) identities (-want +got):\n%s", tag, diff)
	}
}

// listByTagAcrossScopes: one listing finds the instances of every scope (and
// every page of a paged backend), each with a distinct, non-empty Scope.
// Without Harness.Scopes there is nothing to check.
func listByTagAcrossScopes(s *suite) {
	if len(s.h.Scopes) == 0 {
		return
	}
	tag := newTag()
	var want []string
	scopeOf := map[string]string{}
	for _, tmpl := range s.h.Scopes {
		req := s.requestFrom(tmpl, tag)
		s.create(req)
		want = append(want, req.Name)
	}
	sort.Strings(want)
	got := s.list(tag)
	if diff := cmp.Diff(want, names(got)); diff != "" {
		s.t.Errorf("ListByTag(%q) across %d scopes (-want +got):\n%s", tag, len(s.h.Scopes), diff)
	}
	for _, inst := range got {
		if inst.Scope == "" {
			s.t.Errorf("ListByTag(%q): instance %q has no Scope", tag, inst.Name)
		}
		scopeOf[inst.Scope] = inst.Name
	}
	if len(scopeOf) != len(s.h.Scopes) {
		s.t.Errorf("ListByTag(%q): %d distinct scopes %v, want %d", tag, len(scopeOf), scopeOf, len(s.h.Scopes))
	}
}

// listByTagReportsUnreachable: with one scope unreachable, ListByTag returns
// the other scopes' instances and an incomplete-listing error naming that
// scope, so a caller can tell a partial listing from a complete one; once the
// scope answers again the listing is complete.
func listByTagReportsUnreachable(s *suite) {
	if s.h.MakeUnreachable == nil || len(s.h.Scopes) < 2 {
		return
	}
	tag := newTag()
	hidden := s.requestFrom(s.h.Scopes[0], tag)
	s.create(hidden)
	var visible []string
	for _, tmpl := range s.h.Scopes[1:] {
		req := s.requestFrom(tmpl, tag)
		s.create(req)
		visible = append(visible, req.Name)
	}
	sort.Strings(visible)
	scope, restore := s.h.MakeUnreachable(s.t)
	insts, err := s.p.ListByTag(s.ctx(), tag)
	restore()
	unreachable, ok := provider.UnreachableScopes(err)
	if !ok {
		s.t.Errorf("ListByTag(%q) with scope %q unreachable: error %v, want an incomplete-listing error", tag, scope, err)
	}
	if diff := cmp.Diff([]string{scope}, unreachable); ok && diff != "" {
		s.t.Errorf("ListByTag(%q) unreachable scopes (-want +got):\n%s", tag, diff)
	}
	if diff := cmp.Diff(visible, names(insts)); diff != "" {
		s.t.Errorf("ListByTag(%q) with scope %q unreachable lists (-want +got):\n%s", tag, scope, diff)
	}
	all := append([]string{hidden.Name}, visible...)
	sort.Strings(all)
	if diff := cmp.Diff(all, names(s.list(tag))); diff != "" {
		s.t.Errorf("ListByTag(%q) after scope %q answers again (-want +got):\n%s", tag, scope, diff)
	}
}

// requestFrom is newRequest on another template.
func (s *suite) requestFrom(tmpl provider.CreateRequest, tag string) provider.CreateRequest {
	uid := uuid.NewUUID()
	req := tmpl
	req.Name = provider.NameFromUID(uid)
	req.Tag = tag
	req.OwnerUID = uid
	// Distinct per request, so a provider that mixed them up is caught.
	req.SpecHash = strings.ToLower(provider.NameFromUID(uuid.NewUUID())[len("proxy-"):])
	return req
}
