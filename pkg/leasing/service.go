package leasing

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// APIs name the front doors in proxy_operator_lease_requests_total{api}.
const (
	APIHTTP       = "http"
	APIKubernetes = "kubernetes"
)

// Outcomes of a lease request (proxy_operator_lease_requests_total{outcome}).
const (
	OutcomeGranted    = "granted"
	OutcomeNoMatch    = "no_match"
	OutcomeBadRequest = "bad_request"
	OutcomeRejected   = "rejected" // a wait queue was full
	OutcomeCancelled  = "cancelled"
	OutcomeError      = "error"
)

// APIs returns every API label value.
func APIs() []string { return []string{APIHTTP, APIKubernetes} }

// Outcomes returns every outcome label value.
func Outcomes() []string {
	return []string{OutcomeGranted, OutcomeNoMatch, OutcomeBadRequest, OutcomeRejected, OutcomeCancelled, OutcomeError}
}

// Recorder counts lease requests; pkg/metrics implements it. It must not
// block.
type Recorder interface {
	LeaseRequest(api, outcome string)
}

// Queue is the wait queue as the service uses it; *Waiter implements it.
type Queue interface {
	// Wait grants req now or when capacity appears before deadline. Its
	// error is the service's answer: an *Error whose Reason says how the
	// request ended (ReasonNoMatch with the counts and QueuedAhead,
	// ReasonQueueFull with RetryAfter, ReasonCancelled, ReasonShuttingDown,
	// or the store's refusal as FromStore maps it). A grant whose caller
	// left (ctx ended) is given back by the queue, not returned.
	Wait(ctx context.Context, req lease.AcquireRequest, priority int, deadline time.Time) (*Lease, error)
}

// Limits are the bounds a front door's requests are checked against.
type Limits struct {
	// MaxTTL is --max-lease-ttl.
	MaxTTL time.Duration
	// MaxWait is the door's longest wait.
	MaxWait time.Duration
}

// Service is the lease path of one front door: every lease request of that
// door goes through it, so what the doors would otherwise each decide is
// decided here once — the bounds of a request, the queue every acquire goes
// through (a zero wait is a deadline of now), a grant whose caller left given
// back, every acquire outcome counted under the door's API label, and one
// error vocabulary (*Error, by Reason). Holder checks are the store's:
// holder lease.AnyHolder skips them (the Kubernetes API, where RBAC decides).
type Service struct {
	api     string
	maxWait time.Duration
	store   *lease.Store
	queue   Queue
	clock   clock.PassiveClock
	rec     Recorder
	gate    *Gate
	ids     IDVerifier
	// priorities grant priorities above the default.
	priorities PriorityGrants
	// auth mints proxy credentials (nil: proxies check none).
	auth ProxyAuth
}

// IDVerifier reads the lease a signed lease ID names; *leaseid.Signer
// implements it.
type IDVerifier interface {
	// Verify returns the lease name names as it was granted (name is the
	// lease's ID, or its name: a prefix and the ID), or an error when name
	// holds no ID this operator signed (forged, tampered, random).
	Verify(name string) (lease.Lease, error)
}

// ServiceDeps are what a Service runs on.
type ServiceDeps struct {
	// Store holds the leases (required).
	Store *lease.Store
	// Queue is the wait queue in front of Store (required).
	Queue Queue
	// Clock sets wait deadlines (default: real).
	Clock clock.PassiveClock
	// Recorder counts outcomes (optional).
	Recorder Recorder
	// Gate refuses lease requests while this replica does not serve (nil:
	// always serves).
	Gate *Gate
	// IDs, when set, reads signed lease IDs, so that a renew or
	// release of a lease lost in a crash takes it back (lease.Store.Readmit).
	IDs IDVerifier
	// Priorities grant priorities above the default (nil: none).
	Priorities PriorityGrants
	// Auth mints the credentials of a lease's proxy (nil: proxies check
	// none, answers carry none).
	Auth ProxyAuth
}

// NewService returns the service of the front door api, whose requests may
// wait up to maxWait (0: never).
func NewService(api string, maxWait time.Duration, deps ServiceDeps) (*Service, error) {
	if deps.Store == nil || deps.Queue == nil {
		return nil, fmt.Errorf("leasing: service %q needs a store and a queue", api)
	}
	if maxWait < 0 {
		return nil, fmt.Errorf("leasing: service %q: negative maximum wait %s", api, maxWait)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Recorder == nil {
		deps.Recorder = nopRecorder{}
	}
	return &Service{api: api, maxWait: maxWait, store: deps.Store, queue: deps.Queue, clock: deps.Clock, rec: deps.Recorder, gate: deps.Gate, ids: deps.IDs,
		priorities: deps.Priorities, auth: deps.Auth}, nil
}

// Service returns the service of front door api over this store and queue.
func (l *Leasing) Service(api string, maxWait time.Duration, rec Recorder) (*Service, error) {
	return NewService(api, maxWait, ServiceDeps{Store: l.Store, Queue: l.Waiter, Clock: l.clock, Recorder: rec, Gate: l.Gate, IDs: l.IDs,
		Priorities: l.priorities, Auth: l.Auth})
}

// Limits are the bounds Acquire and Renew check.
func (s *Service) Limits() Limits { return Limits{MaxTTL: s.store.MaxTTL(), MaxWait: s.maxWait} }

// Acquire grants a lease now or, with req.Wait, when capacity appears in
// time. Errors (*Error): ReasonInvalid (ttlSeconds, waitSeconds),
// ReasonNoMatch with counts, ReasonQueueFull with RetryAfter,
// ReasonAlreadyExists, ReasonForbidden (a namespace the identity may not
// use), ReasonCancelled (a grant made as the caller left is
// given back), ReasonShuttingDown.
func (s *Service) Acquire(ctx context.Context, req Request) (*lease.Lease, error) {
	if err := s.gate.check(ctx); err != nil {
		s.rec.LeaseRequest(s.api, outcomeOf(err))
		return nil, err
	}
	if err := s.validate(req); err != nil {
		s.rec.LeaseRequest(s.api, OutcomeBadRequest)
		return nil, err
	}
	deadline := s.clock.Now().Add(req.Wait)
	l, err := s.queue.Wait(ctx, req.acquireRequest(), req.Priority, deadline)
	if err == nil && l == nil {
		err = &Error{Reason: ReasonInternal, Cause: errors.New("the wait queue answered neither a lease nor an error")}
	}
	if err == nil && ctx.Err() != nil {
		// The caller left in that instant: nobody would use or release it.
		s.store.Release(l.ID)
		l, err = nil, &Error{Reason: ReasonCancelled, Cause: fmt.Errorf("the caller left before the grant was answered: %w", ctx.Err())}
	}
	if err != nil {
		// The queue's answer is already an *Error; anything else is a bug.
		err = AsError(err)
	}
	s.rec.LeaseRequest(s.api, outcomeOf(err))
	return l, err
}

// validate checks a request before it may wait: its shape (Validate, the
// same for both doors), the TTL by the store's own rule (CheckTTL), the wait
// against this door's maximum.
func (s *Service) validate(req Request) error {
	if req.Namespace != "" && !req.Identity.MayUse(req.Namespace) {
		return &Error{Reason: ReasonForbidden, Cause: fmt.Errorf("%s may lease only in the namespaces %s, not in %q",
			req.Identity.Holder, strings.Join(req.Identity.Namespaces, ", "), req.Namespace)}
	}
	var e *Error
	if err := s.store.CheckTTL(req.TTL); err != nil {
		e = invalidTTL(err, req.TTL)
	}
	if errs := req.Validate(); len(errs) > 0 {
		if e == nil {
			e = invalid()
		}
		e.Fields = append(errs, e.Fields...)
	}
	if maxP := s.priorities.Max(req.Identity); req.Priority > maxP || req.Priority < MinPriority {
		if e == nil {
			e = invalid()
		}
		e.Fields = append(e.Fields, field.Invalid(field.NewPath("priority"), req.Priority,
			fmt.Sprintf("must be between %d and %d for this identity: a priority above 0 is granted by the operator's --lease-max-priority", MinPriority, maxP)))
	}
	var wait *field.Error
	switch secs := int64(req.Wait / time.Second); {
	case req.Wait < 0:
		wait = field.Invalid(field.NewPath("waitSeconds"), secs, "must not be negative")
	case req.Wait > 0 && s.maxWait == 0:
		wait = field.Forbidden(field.NewPath("waitSeconds"), "this server does not queue lease requests: leave it at 0 and retry on no match")
	case req.Wait > s.maxWait:
		wait = field.Invalid(field.NewPath("waitSeconds"), secs, fmt.Sprintf("exceeds the maximum %d", int64(s.maxWait/time.Second)))
	}
	if e == nil && wait == nil {
		return nil
	}
	if e == nil {
		e = invalid()
	}
	if wait != nil {
		e.Fields = append(e.Fields, wait)
	}
	return e
}

// Invalid counts a request the front door refused as malformed before it
// reached the service (unreadable body, wrong type).
func (s *Service) Invalid() { s.rec.LeaseRequest(s.api, OutcomeBadRequest) }

// Release ends a live lease of holder and reports whether this call ended
// it; releasing an unknown or ended lease is not an error (idempotent).
// Errors: ReasonForbidden (another holder's lease, left as it was).
func (s *Service) Release(holder, id string) (bool, error) {
	if err := s.gate.check(context.Background()); err != nil {
		return false, err
	}
	ok, err := s.store.ReleaseAs(holder, id)
	if !ok && err == nil {
		// Unknown: a lease a crash lost is taken back and released, so that
		// it is remembered as ended (a later renew says so). Whatever else
		// the reclaim answers (not a lost lease, ended, expired, its proxy
		// gone or full) the lease is not live: still idempotent. Only
		// another holder's lease is refused.
		retry, rerr := s.reclaimUnknown(holder, id, lease.ErrUnknownLease)
		switch {
		case retry:
			ok, err = s.store.ReleaseAs(holder, id)
		case IsForbidden(rerr) || IsShuttingDown(rerr) || IsNotLeader(rerr):
			return false, rerr
		}
	}
	return ok, storeError(id, err)
}

// Renew extends a live lease of holder to ttl from now (0: its TTL).
// Errors: ReasonInvalid (ttlSeconds), ReasonNotFound, ReasonEnded,
// ReasonForbidden.
func (s *Service) Renew(holder, id string, ttl time.Duration) (*lease.Lease, error) {
	return s.Update(holder, id, ttl, nil)
}

// Update is Renew that also replaces the lease's metadata when meta is not
// nil, in one change.
func (s *Service) Update(holder, id string, ttl time.Duration, meta *lease.Metadata) (*lease.Lease, error) {
	if err := s.gate.check(context.Background()); err != nil {
		return nil, err
	}
	if err := s.store.CheckTTL(ttl); err != nil {
		e := invalidTTL(err, ttl)
		e.ID = id
		return nil, e
	}
	l, err := s.store.UpdateAs(holder, id, ttl, meta)
	if retry, rerr := s.reclaimUnknown(holder, id, err); rerr != nil {
		return nil, rerr
	} else if retry {
		l, err = s.store.UpdateAs(holder, id, ttl, meta)
	}
	return l, storeError(id, err)
}

// Report records a result (lease.ResultOK, …) for target on a lease of
// holder, live or ended within the cooldown window. Errors: ReasonInvalid
// (result), ReasonNotFound, ReasonForbidden.
func (s *Service) Report(holder, id, result, target string) error {
	if err := s.checkReport(id, result, target); err != nil {
		return err
	}
	err := s.store.ReportAs(holder, id, result, target)
	if lease.IsUnknownLease(err) {
		return s.reportLost(holder, "", id, result, target)
	}
	return storeError(id, err)
}

// ReportByName is Report on the lease namespace/name (live, ended within
// the cooldown window, or lost in a crash: name is then its signed ID or a
// prefix and it) by holder (lease.AnyHolder: whoever the front door
// authorized); another holder's lease is ReasonForbidden.
func (s *Service) ReportByName(holder, namespace, name, result, target string) error {
	if id, _, ok := s.store.LookupName(namespace, name); ok {
		return s.Report(holder, id, result, target)
	}
	if err := s.checkReport(name, result, target); err != nil {
		return err
	}
	return s.reportLost(holder, namespace, name, result, target)
}

// checkReport refuses a report this replica does not serve, whose result
// is not one of lease.ValidResult's or whose target is malformed.
func (s *Service) checkReport(id, result, target string) error {
	if err := s.gate.check(context.Background()); err != nil {
		return err
	}
	if !lease.ValidResult(result) {
		e := invalidResult(result)
		e.ID = id
		return e
	}
	return checkTarget(id, target)
}

// checkTarget refuses a malformed target (ReasonInvalid naming lease id).
func checkTarget(id, target string) error {
	if errs := leasingv1alpha1.ValidateTarget(target, field.NewPath("target")); len(errs) > 0 {
		e := invalid(errs...)
		e.ID = id
		return e
	}
	return nil
}

// reportLost is the report on an ID the store does not know: when it is a
// lease a crash lost (its signed ID proves it), the report starts its
// cooldown and brings the lease back no more than a report on an ended lease
// would (lease.Store.ReportLost): its holder may have released it before the
// crash. namespace ("" = any) must be the lease's.
func (s *Service) reportLost(holder, namespace, id, result, target string) error {
	claim, err := s.claim(holder, namespace, id)
	if err != nil {
		return err
	}
	return storeError(id, s.store.ReportLost(claim, result, target))
}

// claim is the lease id's signed ID proves, when namespace ("" = any) and
// holder (lease.AnyHolder = any) are its. Errors: ReasonNotFound (no signed
// ID, or another namespace), ReasonForbidden (another holder).
func (s *Service) claim(holder, namespace, id string) (lease.Lease, error) {
	notFound := storeError(id, fmt.Errorf("lease %s: %w", id, lease.ErrUnknownLease))
	if s.ids == nil {
		return lease.Lease{}, notFound
	}
	claim, err := s.ids.Verify(id)
	if err != nil || (namespace != "" && claim.Namespace != namespace) {
		return lease.Lease{}, notFound
	}
	if holder != lease.AnyHolder && holder != claim.Holder {
		return lease.Lease{}, storeError(id, &lease.NotHolderError{ID: id})
	}
	return claim, nil
}

// reclaimUnknown is the one rule of Renew, Report and Release for an ID the
// store answered err for: when err says the lease is unknown, a lease lost
// in a crash is taken back (Reclaim), and retry says to make the call again;
// else nothing is done. rerr is Reclaim's refusal.
func (s *Service) reclaimUnknown(holder, id string, err error) (retry bool, rerr error) {
	if !lease.IsUnknownLease(err) || s.ids == nil {
		return false, nil
	}
	if _, rerr = s.Reclaim(holder, "", id); rerr != nil {
		return false, rerr
	}
	return true, nil
}

// Reclaim takes back the lease id names when it was lost in an operator
// crash (granted after the last checkpoint): its signed ID proves it, and
// it returns to its proxy if that has room. id may also be the lease's name
// (its prefix and ID: a generated ProxyLease name). namespace ("" = any) and holder
// (lease.AnyHolder = any) must be the lease's. Renew and Release do it for
// an unknown ID (a report does not: see reportLost); a front door that looks leases up by name itself
// calls it when the name is not found. Errors: ReasonNotFound (not a signed
// ID, or not a lease a crash can have lost), ReasonForbidden, ReasonEnded
// (expired, or its proxy is gone), ReasonNoRoom (its proxy was leased to
// capacity since).
func (s *Service) Reclaim(holder, namespace, id string) (*lease.Lease, error) {
	if err := s.gate.check(context.Background()); err != nil {
		return nil, err
	}
	claim, err := s.claim(holder, namespace, id)
	if err != nil {
		return nil, err
	}
	l, err := s.store.Readmit(claim)
	return l, storeError(id, err)
}

// outcomeOf is the proxy_operator_lease_requests_total outcome of an Acquire that returned err.
func outcomeOf(err error) string {
	switch ReasonOf(err) {
	case "":
		return OutcomeGranted
	case ReasonNoMatch:
		return OutcomeNoMatch
	case ReasonQueueFull:
		return OutcomeRejected
	case ReasonCancelled:
		return OutcomeCancelled
	case ReasonInvalid, ReasonAlreadyExists:
		return OutcomeBadRequest
	}
	return OutcomeError
}

type nopRecorder struct{}

func (nopRecorder) LeaseRequest(string, string) {}

// Seconds converts a wire count of seconds to a Duration, saturating instead
// of overflowing, so an absurd ttlSeconds is refused as too long rather than
// wrapping to a small or negative one.
func Seconds(n int64) time.Duration {
	const maxSeconds = int64(math.MaxInt64 / int64(time.Second))
	switch {
	case n > maxSeconds:
		return math.MaxInt64
	case n < -maxSeconds:
		return math.MinInt64
	}
	return time.Duration(n) * time.Second
}
