package providertest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// T is the part of testing.TB the suite uses. *testing.T implements it; Check
// supplies a recording implementation. Fatalf must stop the case (testing's
// does so with runtime.Goexit, as Check's does).
type T interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	Context() context.Context
}

var _ T = (*testing.T)(nil)

// Harness adapts a provider to the suite.
type Harness struct {
	// New returns a fresh provider for one case. Required. It may register
	// cleanups on t and fail t.
	New func(t T) provider.Provider

	// Template is the base of every CreateRequest the suite sends; the
	// suite sets Name, Tag and OwnerUID. Use it for what the provider
	// needs (Namespace, Proxy with its provider block, CloudInit).
	Template provider.CreateRequest

	// MakeRunning, if set, drives a created instance towards Running (for
	// backends where nothing else would, e.g. pods without a kubelet). The
	// suite then polls Get until Running. If nil, the suite only polls.
	MakeRunning func(ctx context.Context, t T, p provider.Provider, providerID string)

	// MissingID, if set, returns a well-formed providerID for an instance of
	// that name which does not exist; the suite checks Get and Delete of it
	// besides those of a providerID the provider never issued.
	MissingID func(name string) string

	// Scopes, if set, are templates of instances in distinct scopes (zones,
	// projects). CaseListByTagAcrossScopes creates one instance from each
	// and expects one ListByTag to list them all, each with its own Scope.
	Scopes []provider.CreateRequest

	// MakeUnreachable, if set, makes the scope of instances created from
	// Scopes[0] unreachable for listings until restore is called, and
	// returns that scope's name. CaseListByTagReportsUnreachable then
	// expects ListByTag to list the other scopes' instances and to return
	// an incomplete-listing error naming exactly that scope. Requires at
	// least two Scopes.
	MakeUnreachable func(t T) (scope string, restore func())

	// Timeout bounds each eventual condition (Running, gone). Default 30s.
	Timeout time.Duration
	// Interval is the polling period. Default 50ms.
	Interval time.Duration
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 30 * time.Second
}

func (h Harness) interval() time.Duration {
	if h.Interval > 0 {
		return h.Interval
	}
	return 50 * time.Millisecond
}

// Case names, stable so negative controls can name the case they expect to
// fail.
const (
	CaseCreateThenGet                = "CreateThenGet"
	CaseCreateIsIdempotent           = "CreateIsIdempotent"
	CaseConcurrentCreateIsIdempotent = "ConcurrentCreateIsIdempotent"
	CaseCreateRejectsInvalidRequest  = "CreateRejectsInvalidRequest"
	CaseReachesRunning               = "ReachesRunning"
	CaseGetMissingIsNotFound         = "GetMissingIsNotFound"
	CaseDeleteMissingSucceeds        = "DeleteMissingSucceeds"
	CaseDeleteThenGetNotFound        = "DeleteThenGetNotFound"
	CaseListByTagFiltersByTag        = "ListByTagFiltersByTag"
	CaseListByTagCarriesOwner        = "ListByTagCarriesOwner"
	CaseListByTagAcrossScopes        = "ListByTagAcrossScopes"
	CaseListByTagReportsUnreachable  = "ListByTagReportsUnreachable"
)

type testCase struct {
	name string
	run  func(s *suite)
}

func cases() []testCase {
	return []testCase{
		{CaseCreateThenGet, createThenGet},
		{CaseCreateIsIdempotent, createIsIdempotent},
		{CaseConcurrentCreateIsIdempotent, concurrentCreateIsIdempotent},
		{CaseCreateRejectsInvalidRequest, createRejectsInvalidRequest},
		{CaseReachesRunning, reachesRunning},
		{CaseGetMissingIsNotFound, getMissingIsNotFound},
		{CaseDeleteMissingSucceeds, deleteMissingSucceeds},
		{CaseDeleteThenGetNotFound, deleteThenGetNotFound},
		{CaseListByTagFiltersByTag, listByTagFiltersByTag},
		{CaseListByTagCarriesOwner, listByTagCarriesOwner},
		{CaseListByTagAcrossScopes, listByTagAcrossScopes},
		{CaseListByTagReportsUnreachable, listByTagReportsUnreachable},
	}
}

// CaseNames returns the names of the suite's cases, in run order.
func CaseNames() []string {
	var names []string
	for _, c := range cases() {
		names = append(names, c.name)
	}
	return names
}

// Run runs every case as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("providertest.Harness.New is required")
	}
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) { runCase(t, h, c) })
	}
}

func runCase(t T, h Harness, c testCase) {
	p := h.New(t)
	if p == nil {
		t.Fatalf("Harness.New returned a nil provider")
	}
	s := &suite{t: t, h: h, p: &checked{t: t, next: p}}
	// Registered after New's cleanups, so it runs before them: instances go
	// before whatever backs the provider.
	t.Cleanup(s.cleanup)
	c.run(s)
}

// suite is the state of one case.
type suite struct {
	t T
	h Harness
	p *checked
}

func (s *suite) ctx() context.Context { return s.t.Context() }

// newTag returns a tag unique to this run, legal as a label value everywhere.
func newTag() string {
	return "providertest-" + provider.NameFromUID(uuid.NewUUID())[len("proxy-"):][:10]
}

// newRequest returns a valid request for a fresh owner under tag.
func (s *suite) newRequest(tag string) provider.CreateRequest {
	return s.requestFrom(s.h.Template, tag)
}

// create creates req and fails the case on error.
func (s *suite) create(req provider.CreateRequest) string {
	s.t.Helper()
	id, err := s.p.Create(s.ctx(), req)
	if err != nil {
		s.t.Fatalf("Create(%q): %v", req.Name, err)
	}
	if id == "" {
		s.t.Fatalf("Create(%q) returned an empty providerID", req.Name)
	}
	return id
}

func (s *suite) list(tag string) []provider.Instance {
	s.t.Helper()
	insts, err := s.p.ListByTag(s.ctx(), tag)
	if err != nil {
		s.t.Fatalf("ListByTag(%q): %v", tag, err)
	}
	return insts
}

// poll calls cond until it reports done, fails or the harness timeout passes.
func (s *suite) poll(what string, cond func(ctx context.Context) (bool, error)) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(s.ctx(), s.h.interval(), s.h.timeout(), true, cond)
	if err != nil {
		s.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// cleanup deletes every instance the case created, on a context of its own:
// the case's context is already cancelled when cleanups run.
func (s *suite) cleanup() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.t.Context()), s.h.timeout())
	defer cancel()
	for _, id := range s.p.createdIDs() {
		if err := s.p.Delete(ctx, id); err != nil {
			s.t.Errorf("cleanup: Delete(%q): %v", id, err)
		}
	}
}

func names(insts []provider.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, i := range insts {
		out = append(out, i.Name)
	}
	sort.Strings(out)
	return out
}

// --- cases ---

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

// --- invariant checker ---

// checked wraps the provider under test and reports any result that breaks
// the contract, whatever the case is about.
type checked struct {
	t    T
	next provider.Provider

	mu       sync.Mutex
	created  []string
	reported map[string]bool
}

// violation reports a broken invariant once per case: a poll loop would
// otherwise repeat the same message on every attempt.
func (c *checked) violation(format string, args ...any) {
	msg := "contract: " + fmt.Sprintf(format, args...)
	c.mu.Lock()
	seen := c.reported[msg]
	if c.reported == nil {
		c.reported = map[string]bool{}
	}
	c.reported[msg] = true
	c.mu.Unlock()
	if !seen {
		c.t.Errorf("%s", msg)
	}
}

var _ provider.Provider = (*checked)(nil)

func (c *checked) createdIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Compact(slices.Sorted(slices.Values(c.created)))
}

func (c *checked) checkErr(call string, err error) {
	if err != nil && !provider.IsClassified(err) {
		c.violation("%s returned an unclassified error %q (%T): wrap it with provider.NotFound/QuotaExceeded/Permanent/Transient", call, err, err)
	}
}

func (c *checked) checkInstance(call string, inst provider.Instance) {
	if !inst.State.Known() {
		c.violation("%s: instance %q has unknown state %q", call, inst.Name, inst.State)
	}
	if inst.State == provider.StateRunning && inst.IP == "" {
		c.violation("%s: instance %q is Running without an IP", call, inst.Name)
	}
	if inst.CreatedAt.IsZero() {
		c.violation("%s: instance %q has a zero CreatedAt", call, inst.Name)
	}
	if inst.ProviderID == "" || inst.Name == "" {
		c.violation("%s: instance without providerID or name: %+v", call, inst)
	}
}

func (c *checked) Create(ctx context.Context, req provider.CreateRequest) (string, error) {
	id, err := c.next.Create(ctx, req)
	call := fmt.Sprintf("Create(%q)", req.Name)
	c.checkErr(call, err)
	if err == nil {
		if id == "" {
			c.violation("%s succeeded with an empty providerID", call)
		} else {
			c.mu.Lock()
			c.created = append(c.created, id)
			c.mu.Unlock()
		}
	}
	return id, err
}

func (c *checked) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	inst, err := c.next.Get(ctx, providerID)
	call := fmt.Sprintf("Get(%q)", providerID)
	c.checkErr(call, err)
	switch {
	case err != nil && inst != nil:
		c.violation("%s returned both an instance and the error %v", call, err)
	case err == nil && inst == nil:
		c.violation("%s returned neither an instance nor an error", call)
	case err == nil:
		if inst.ProviderID != providerID {
			c.violation("%s returned providerID %q", call, inst.ProviderID)
		}
		c.checkInstance(call, *inst)
	}
	return inst, err
}

func (c *checked) Delete(ctx context.Context, providerID string) error {
	err := c.next.Delete(ctx, providerID)
	call := fmt.Sprintf("Delete(%q)", providerID)
	c.checkErr(call, err)
	if provider.IsNotFound(err) {
		c.violation("%s returned NotFound (%v); deleting a missing instance is success", call, err)
	}
	return err
}

func (c *checked) ListByTag(ctx context.Context, tag string) ([]provider.Instance, error) {
	insts, err := c.next.ListByTag(ctx, tag)
	call := fmt.Sprintf("ListByTag(%q)", tag)
	c.checkErr(call, err)
	if err != nil && !provider.IsIncompleteList(err) && len(insts) > 0 {
		c.violation("%s returned %d instances with the error %v; only an incomplete listing returns both", call, len(insts), err)
	}
	for _, inst := range insts {
		if inst.Tag != tag {
			c.violation("%s listed %q with tag %q", call, inst.Name, inst.Tag)
		}
		c.checkInstance(call, inst)
	}
	return insts, err
}

// --- negative controls ---

// Failure is a case that failed under Check, with what it reported.
type Failure struct {
	Case     string
	Messages []string
}

// Check runs every case against h with a recording T and returns the cases
// that failed, in run order; nil means the provider passed. It lets a test
// assert that a broken provider fails the suite without failing itself.
func Check(h Harness) []Failure {
	var out []Failure
	for _, c := range cases() {
		r := newRecorder(c.name)
		if h.New == nil {
			r.Errorf("providertest.Harness.New is required")
		} else {
			r.run(func() { runCase(r, h, c) })
		}
		if msgs := r.messages(); r.failed() {
			out = append(out, Failure{Case: c.name, Messages: msgs})
		}
	}
	return out
}

// Failed returns the names of the failed cases.
func Failed(fs []Failure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Case)
	}
	return out
}

// recorder is a T that records instead of failing. Each case body and each
// cleanup runs on its own goroutine so Fatalf can stop it with
// runtime.Goexit, as testing does.
type recorder struct {
	name   string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	msgs     []string
	fail     bool
	cleanups []func()
}

var _ T = (*recorder)(nil)

func newRecorder(name string) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	return &recorder{name: name, ctx: ctx, cancel: cancel}
}

// run runs body, then (context cancelled first, as testing does) the
// cleanups in reverse order.
func (r *recorder) run(body func()) {
	r.goexitSafe(body)
	r.cancel()
	for {
		r.mu.Lock()
		if len(r.cleanups) == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[len(r.cleanups)-1]
		r.cleanups = r.cleanups[:len(r.cleanups)-1]
		r.mu.Unlock()
		r.goexitSafe(f)
	}
}

// goexitSafe runs f on a goroutine and waits; a panic is recorded as a failure.
func (r *recorder) goexitSafe(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				r.Errorf("panic: %v", v)
			}
		}()
		f()
	}()
	<-done
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }

func (r *recorder) Context() context.Context { return r.ctx }

func (r *recorder) Logf(string, ...any) {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = true
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail
}

func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}
