package discovery

import (
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// HolderPrefix marks leases made over HTTP: the holder is "http:<identity>"
// and the default flow the same, so HTTP identities never share a flow with
// Kubernetes users of the aggregated API.
const HolderPrefix = "http:"

func (s *Server) limits() Limits {
	return Limits{MaxTTL: s.opts.Leaser.MaxTTL(), MaxWait: s.opts.MaxWait}
}

// readBody reads the (size-limited) body; false means an answer was sent.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge,
				"request body over "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
			return nil, false
		}
		writeError(w, http.StatusBadRequest, wire.CodeInvalidJSON, "reading the body: "+err.Error())
		return nil, false
	}
	return data, true
}

func writeDecodeError(w http.ResponseWriter, err error) {
	var re *RequestError
	if errors.As(err, &re) {
		writeRequestError(w, re)
		return
	}
	writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, err.Error())
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok"})
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}

func toWireProxy(p lease.ProxyInfo) wire.Proxy {
	return wire.Proxy{
		Name: p.Name, Namespace: p.Namespace, URL: p.URL, Host: p.Host, Port: p.Port,
		Attributes: p.Attributes, LatencyMillis: p.LatencyMillis,
	}
}

func toWireLease(l *lease.Lease) wire.Lease {
	return wire.Lease{
		LeaseID:      l.ID,
		Proxy:        toWireProxy(l.Proxy),
		ProxyHealthy: l.Proxy.Healthy,
		ExpiresAt:    l.ExpiresAt.UTC(),
		TTLSeconds:   int64(l.TTLSeconds()),
	}
}

func (s *Server) listProxies(w http.ResponseWriter, r *http.Request) {
	q, err := ParseProxyQuery(r.URL.RawQuery)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	infos, err := s.opts.Lister.ListProxies(r.Context(), q.Namespace)
	if err != nil {
		log.FromContext(r.Context()).Error(err, "listing proxies")
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "the proxy list cannot be read now; retry shortly")
		return
	}
	counts := s.opts.Leaser.Counts()
	out := wire.ProxyList{Proxies: []wire.ListedProxy{}}
	for _, p := range infos {
		if q.Namespace != "" && p.Namespace != q.Namespace {
			continue
		}
		if q.Healthy != nil && p.Healthy != *q.Healthy {
			continue
		}
		if !selectorMatches(p.Attributes, q.Selector) {
			continue
		}
		out.Proxies = append(out.Proxies, wire.ListedProxy{
			Proxy:        toWireProxy(p),
			Healthy:      p.Healthy,
			ActiveLeases: counts[p.Key()],
		})
	}
	slices.SortFunc(out.Proxies, func(a, b wire.ListedProxy) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	out.Count = len(out.Proxies)
	writeJSON(w, http.StatusOK, out)
}

func selectorMatches(attrs, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// flowFor: the token's identity, or identity/flow when the request names one
// (a token cannot join another identity's flow).
func flowFor(identity, flow string) string {
	if flow == "" {
		return HolderPrefix + identity
	}
	return HolderPrefix + identity + "/" + flow
}

// retryAfter is how a Waiter says "queue full, rejected at once".
type retryAfter interface {
	RetryAfter() time.Duration
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	data, ok := readBody(w, r)
	if !ok {
		s.invalid()
		return
	}
	req, err := DecodeAcquireRequest(data, s.limits())
	if err != nil {
		s.invalid()
		writeDecodeError(w, err)
		return
	}
	identity := identityFrom(r.Context())
	lreq := lease.AcquireRequest{
		Namespace: req.Namespace,
		Selector:  req.Selector,
		Target:    req.Target,
		TTL:       time.Duration(req.TTLSeconds) * time.Second,
		Holder:    holderOf(r),
		Flow:      flowFor(identity, req.Flow),
	}
	var l *lease.Lease
	if s.opts.Waiter != nil {
		// Every request goes through the queue, a request without a wait
		// with a deadline of now: it is granted only when that cannot
		// overtake a waiter owed the capacity.
		deadline := s.opts.Clock.Now().Add(time.Duration(req.WaitSeconds) * time.Second)
		l, err = s.opts.Waiter.Wait(r.Context(), lreq, int(req.Priority), deadline)
	} else {
		l, err = s.opts.Leaser.Acquire(lreq)
	}
	if err != nil {
		s.acquireFailed(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/leases/"+l.ID)
	writeJSON(w, http.StatusCreated, toWireLease(l))
}

// invalid counts a malformed POST /v1/leases, which never reaches the queue.
func (s *Server) invalid() {
	if s.opts.Waiter != nil {
		s.opts.Waiter.Invalid()
	}
}

func (s *Server) acquireFailed(w http.ResponseWriter, r *http.Request, err error) {
	var ra retryAfter
	switch {
	case lease.IsNoMatch(err):
		var nm lease.NoMatchError
		if c := (*lease.NoMatchError)(nil); errors.As(err, &c) {
			nm = *c
		}
		writeJSON(w, http.StatusConflict, wire.Error{
			Error:      wire.CodeNoMatch,
			Message:    "no proxy can take this lease now",
			Considered: &nm.Considered,
			AtCapacity: &nm.AtCapacity,
			InCooldown: &nm.InCooldown,
			Unhealthy:  &nm.Unhealthy,
		})
	case errors.As(err, &ra):
		secs := int64(math.Ceil(ra.RetryAfter().Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		writeError(w, http.StatusTooManyRequests, wire.CodeQueueFull, "the wait queue is full: "+err.Error())
	case lease.IsTTLTooLong(err), lease.IsNegativeTTL(err):
		// Validation catches these first; kept so a store with other limits still answers 400.
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, err.Error())
	case r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "request cancelled")
	default:
		log.FromContext(r.Context()).Error(err, "acquiring a lease")
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
	}
}

// holderOf is the holder of the leases the caller of r makes and may change.
func holderOf(r *http.Request) string { return HolderPrefix + identityFrom(r.Context()) }

// writeNotHolder answers a change to another identity's lease.
func writeNotHolder(w http.ResponseWriter, err error) {
	writeError(w, http.StatusForbidden, wire.CodeForbidden, err.Error())
}

// getLease shows one of the caller's leases as it is now: where its proxy is
// (a replaced instance's new address) and whether it is healthy.
func (s *Server) getLease(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	l, err := s.opts.Leaser.GetAs(holderOf(r), id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, toWireLease(&l))
	case lease.IsNotHolder(err):
		writeNotHolder(w, err)
	case lease.IsLeaseEnded(err):
		writeError(w, http.StatusGone, wire.CodeLeaseEnded, "lease "+strconv.Quote(id)+": "+endedMessage(err))
	default:
		writeError(w, http.StatusNotFound, wire.CodeUnknownLease, "no lease "+strconv.Quote(id))
	}
}

// endedMessage says why a lease ended and what to do.
func endedMessage(err error) string {
	var e *lease.EndedError
	if errors.As(err, &e) {
		return e.Error() + "; acquire a new one"
	}
	return "released or expired; acquire a new one"
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	if _, err := s.opts.Leaser.ReleaseAs(holderOf(r), r.PathValue("id")); lease.IsNotHolder(err) {
		writeNotHolder(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	req, err := DecodeReportRequest(data)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	err = s.opts.Leaser.ReportAs(holderOf(r), r.PathValue("id"), req.Result, req.Target)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case lease.IsNotHolder(err):
		writeNotHolder(w, err)
	case lease.IsInvalidResult(err):
		writeError(w, http.StatusBadRequest, wire.CodeInvalidResult,
			"result "+strconv.Quote(req.Result)+" is not one of ok, rate_limited, banned")
	case lease.IsUnknownLease(err):
		writeError(w, http.StatusNotFound, wire.CodeUnknownLease, "no lease "+strconv.Quote(r.PathValue("id"))+" (or it ended more than a cooldown window ago)")
	default:
		log.FromContext(r.Context()).Error(err, "reporting on a lease")
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
	}
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	req, err := DecodeRenewRequest(data, s.limits())
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	l, err := s.opts.Leaser.RenewAs(holderOf(r), r.PathValue("id"), time.Duration(req.TTLSeconds)*time.Second)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, toWireLease(l))
	case lease.IsNotHolder(err):
		writeNotHolder(w, err)
	case lease.IsUnknownLease(err):
		writeError(w, http.StatusNotFound, wire.CodeUnknownLease, "no lease "+strconv.Quote(r.PathValue("id")))
	case lease.IsLeaseEnded(err):
		writeError(w, http.StatusGone, wire.CodeLeaseEnded, "lease "+strconv.Quote(r.PathValue("id"))+": "+endedMessage(err))
	case lease.IsTTLTooLong(err), lease.IsNegativeTTL(err):
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, err.Error())
	default:
		log.FromContext(r.Context()).Error(err, "renewing a lease")
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
	}
}
