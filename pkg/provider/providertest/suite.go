package providertest

import (
	"context"
	"sort"
	"testing"
	"time"

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
