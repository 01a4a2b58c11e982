package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// readBody reads the (size-limited) body into a buffer of s.buffers; false
// means an answer was sent. Give the buffer back with s.recycle once what
// was decoded from it (which holds none of its bytes) is no longer needed.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, bool) {
	buf := s.buffer()
	if _, err := buf.ReadFrom(r.Body); err != nil {
		s.recycle(buf)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge,
				"request body over "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
			return nil, false
		}
		writeError(w, http.StatusBadRequest, wire.CodeInvalidJSON, "reading the body: "+err.Error())
		return nil, false
	}
	return buf, true
}

// buffer is an empty buffer of s.buffers.
func (s *Server) buffer() *bytes.Buffer {
	if buf, ok := s.buffers.Get().(*bytes.Buffer); ok {
		buf.Reset()
		return buf
	}
	return bytes.NewBuffer(make([]byte, 0, 1024))
}

// maxPooledBuffer: a buffer grown past it (a large body) is left to the GC.
const maxPooledBuffer = 16 << 10

func (s *Server) recycle(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBuffer {
		s.buffers.Put(buf)
	}
}

func writeDecodeError(w http.ResponseWriter, err error) {
	requestAnswer(err).write(w)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok"})
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}

func toWireProxy(p leasing.ProxyInfo) wire.Proxy {
	return wire.Proxy{
		Name: p.Name, Namespace: p.Namespace, URL: p.URL, Host: p.Host, Port: p.Port,
		Attributes: p.Attributes, LatencyMillis: p.LatencyMillis,
	}
}

// toWireLease is l as its holder sees it, with its proxy's credentials.
func (s *Server) toWireLease(l *leasing.Lease) wire.Lease {
	out := wire.Lease{
		LeaseID:       l.ID,
		Proxy:         toWireProxy(l.Proxy),
		ProxyHealthy:  l.Proxy.Healthy,
		ProxyDraining: l.Proxy.Draining,
		ExpiresAt:     l.ExpiresAt.UTC(),
		TTLSeconds:    int64(l.TTLSeconds()),
		Tier:          l.Tier,
	}
	if c, ok := s.opts.Service.Credentials(*l); ok {
		out.Proxy.URL = c.WithURL(l.Proxy.URL)
		out.Credentials = &wire.Credentials{Username: c.Username, Password: c.Password, ExpiresAt: c.ExpiresAt.UTC()}
	}
	return out
}

func (s *Server) listProxies(w http.ResponseWriter, r *http.Request) {
	q, err := ParseProxyQuery(r.URL.RawQuery)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	counts, err := s.opts.Service.Counts(r.Context())
	if err != nil {
		// A standby holds no leases: its counts would all read 0.
		writeServiceError(w, r, err)
		return
	}
	id := leasingIdentity(tokenFrom(r.Context()), "")
	if q.Namespace != "" && !id.MayUse(q.Namespace) {
		writeError(w, http.StatusForbidden, wire.CodeForbidden, fmt.Sprintf("this token may list only the namespaces %s", strings.Join(id.Namespaces, ", ")))
		return
	}
	infos, err := s.opts.Lister.ListProxies(r.Context(), q.Namespace)
	if err != nil {
		log.FromContext(r.Context()).Error(err, "listing proxies")
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "the proxy list cannot be read now; retry shortly")
		return
	}
	out := wire.ProxyList{Proxies: []wire.ListedProxy{}}
	for _, p := range infos {
		if (q.Namespace != "" && p.Namespace != q.Namespace) || !id.MayUse(p.Namespace) {
			continue
		}
		if q.Healthy != nil && p.Healthy != *q.Healthy {
			continue
		}
		if !crawlv1alpha1.SelectorMatches(q.Selector, p.Attributes) {
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

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	buf, ok := s.readBody(w, r)
	if !ok {
		s.opts.Service.Invalid()
		return
	}
	defer s.recycle(buf)
	req, err := DecodeAcquireRequest(buf.Bytes())
	if err != nil {
		s.opts.Service.Invalid()
		writeDecodeError(w, err)
		return
	}
	l, err := s.opts.Service.Acquire(r.Context(), acquireRequest(tokenFrom(r.Context()), req))
	if err != nil {
		writeServiceError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/leases/"+l.ID)
	writeLease(w, http.StatusCreated, s.toWireLease(l), buf)
}

// writeServiceError writes the answer to a leasing Service error.
func writeServiceError(w http.ResponseWriter, r *http.Request, err error) {
	a := serviceAnswer(err)
	if a.status == http.StatusInternalServerError {
		log.FromContext(r.Context()).Error(err, "lease request failed", "method", r.Method, "path", r.URL.Path)
	}
	a.write(w)
}

// serviceAnswer is the one place the leasing Service's error vocabulary
// becomes this API's answers, for the network and in-process callers alike.
func serviceAnswer(err error) *answer {
	e := leasing.AsError(err)
	id := strconv.Quote(e.ID)
	refuse := func(status int, code, message string) *answer {
		return &answer{status: status, body: wire.Error{Error: code, Message: message}}
	}
	switch e.Reason {
	case leasing.ReasonNoMatch:
		nm, ahead := e.Counts, e.QueuedAhead
		msg := "no proxy can take this lease now"
		var site string
		switch {
		case ahead > 0:
			msg = e.QueuedAheadMessage()
		case nm.Site != nil:
			msg, site = nm.Site.Error(), nm.Site.Policy
		case nm.Tier > 0:
			msg = fmt.Sprintf("no proxy of tier %d (selectors[%d]) can take this lease now; every proxy of the tiers before it cools for the target", nm.Tier, nm.Tier)
		}
		return &answer{status: http.StatusConflict, body: wire.Error{
			SitePolicy:  site,
			Tier:        nm.Tier,
			Error:       wire.CodeNoMatch,
			Message:     msg,
			Considered:  &nm.Considered,
			AtCapacity:  &nm.AtCapacity,
			InCooldown:  &nm.InCooldown,
			Unhealthy:   &nm.Unhealthy,
			Free:        &nm.Free,
			QueuedAhead: &ahead,
		}}
	case leasing.ReasonQueueFull:
		a := refuse(http.StatusTooManyRequests, wire.CodeQueueFull, "the wait queue is full: "+err.Error())
		a.retryAfter = max(int64(math.Ceil(e.RetryAfter.Seconds())), 1)
		return a
	case leasing.ReasonInvalid:
		body := wire.Error{Error: wire.CodeInvalidRequest, Message: e.Fields.ToAggregate().Error()}
		switch {
		case e.MaxTTL > 0:
			body.Error = wire.CodeTTLTooLong
			maxSecs := int64(e.MaxTTL / time.Second)
			body.MaxTTLSeconds = &maxSecs
		case e.InvalidResult:
			body.Error = wire.CodeInvalidResult
			body.Message = fmt.Sprintf("result %q is not one of ok, rate_limited, banned", e.Fields[0].BadValue)
		}
		return &answer{status: http.StatusBadRequest, body: body}
	case leasing.ReasonForbidden:
		return refuse(http.StatusForbidden, wire.CodeForbidden, err.Error())
	case leasing.ReasonCooldownLimit:
		return refuse(http.StatusForbidden, wire.CodeCooldownLimit, err.Error())
	case leasing.ReasonNotFound:
		return refuse(http.StatusNotFound, wire.CodeUnknownLease, "no lease "+id+" (or it ended more than a cooldown window ago)")
	case leasing.ReasonEnded:
		return refuse(http.StatusGone, wire.CodeLeaseEnded, "lease "+id+": "+leasing.EndedMessage(err))
	case leasing.ReasonAlreadyExists:
		return refuse(http.StatusConflict, wire.CodeInvalidRequest, err.Error())
	case leasing.ReasonNoRoom:
		return refuse(http.StatusConflict, wire.CodeNoRoom, err.Error())
	case leasing.ReasonCancelled:
		return refuse(http.StatusServiceUnavailable, wire.CodeUnavailable, "request cancelled")
	case leasing.ReasonShuttingDown:
		// A handover: the replica taking over answers within seconds.
		a := refuse(http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error()+"; retry shortly")
		a.retryAfter = 1
		return a
	case leasing.ReasonNotLeader:
		// The client's next connection may reach the leader (a Service, or
		// a load balancer, routes per connection); a kept-alive one would
		// come back here.
		return &answer{status: http.StatusServiceUnavailable, retryAfter: 1, closeConn: true,
			body: wire.Error{Error: wire.CodeNotLeader, Message: err.Error(), Leader: e.Leader}}
	}
	return refuse(http.StatusInternalServerError, wire.CodeInternal, err.Error())
}

// acquireRequest is what the token tok asks for with req.
func acquireRequest(tok Token, req wire.AcquireRequest) leasing.Request {
	return leasing.Request{
		Namespace: req.Namespace,
		Selector:  req.Selector,
		Selectors: req.Selectors,
		Target:    req.Target,
		TTL:       leasing.Seconds(req.TTLSeconds),
		Identity:  leasingIdentity(tok, req.Flow),
		Wait:      leasing.Seconds(req.WaitSeconds),
		Priority:  int(req.Priority),
	}
}

// holderOf is the holder of the leases the caller of r makes and may change.
func holderOf(r *http.Request) string {
	return holder(tokenFrom(r.Context()))
}

// holder is the holder of the leases tok makes and may change.
func holder(tok Token) string {
	return leasing.HTTPIdentity(tok.Identity, "").Holder
}

// getLease shows one of the caller's leases as it is now: where its proxy is
// (a replaced instance's new address) and whether it is healthy.
// With ?target=T, the answer's coolingUntil says whether its proxy cools
// for T.
func (s *Server) getLease(w http.ResponseWriter, r *http.Request) {
	target, err := ParseLeaseQuery(r.URL.RawQuery)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	out, err := s.leaseFor(holderOf(r), r.PathValue("id"), target)
	if err != nil {
		writeServiceError(w, r, err)
		return
	}
	buf := s.buffer()
	defer s.recycle(buf)
	writeLease(w, http.StatusOK, out, buf)
}

// leaseFor is holder's lease id as GET /v1/leases/{id}?target=target
// answers it ("": no target).
func (s *Server) leaseFor(holder, id, target string) (wire.Lease, error) {
	var until time.Time
	if target != "" {
		var err error
		if until, err = s.opts.Service.CoolingFor(holder, id, target); err != nil {
			return wire.Lease{}, err
		}
	}
	l, err := s.opts.Service.Get(holder, id)
	if err != nil {
		return wire.Lease{}, err
	}
	out := s.toWireLease(&l)
	if !until.IsZero() {
		out.CoolingUntil = &until
	}
	return out, nil
}

// release is idempotent: an unknown or ended lease is 204 too.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	if _, err := s.opts.Service.Release(holderOf(r), r.PathValue("id")); err != nil {
		writeServiceError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	buf, ok := s.readBody(w, r)
	if !ok {
		return
	}
	defer s.recycle(buf)
	req, err := DecodeReportRequest(buf.Bytes())
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	if err := s.opts.Service.Report(holderOf(r), r.PathValue("id"), req.Result, req.Target); err != nil {
		writeServiceError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	buf, ok := s.readBody(w, r)
	if !ok {
		return
	}
	defer s.recycle(buf)
	req, err := DecodeRenewRequest(buf.Bytes())
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	l, err := s.opts.Service.Renew(holderOf(r), r.PathValue("id"), leasing.Seconds(req.TTLSeconds))
	if err != nil {
		writeServiceError(w, r, err)
		return
	}
	writeLease(w, http.StatusOK, s.toWireLease(l), buf)
}
