package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// holding is a lease the gateway holds for requests: one request's (or
// tunnel's), or a session's. Its fields after id are guarded by the
// leases' mutex.
type holding struct {
	token, id string
	// traffic ends when the lease does (ended elsewhere, or expired
	// unrenewed): the tunnels and requests on it stop with it.
	traffic    context.Context
	endTraffic context.CancelFunc
	// sessionKey is set while a session holds it.
	sessionKey string

	proxyAddr string
	// proxyURL carries the lease's credentials as userinfo (plain HTTP
	// requests); auth is the same as a Proxy-Authorization value (CONNECT).
	proxyURL *url.URL
	auth     string
	expires  time.Time
	// refs: the requests in flight on it, plus one while a session holds it.
	refs int
	// cooling are the hosts its proxy cools for (a session moves off it
	// for them): reported rate limited through it, or so the lease API said.
	// checked are the hosts the lease API said it does not cool for (its
	// grant's target first): a lease is checked against cooldowns only for
	// the target it is granted for, and a session uses it for every host.
	cooling, checked map[string]bool
	// reporting counts its reports in flight; reported is closed when the
	// count drops to 0 (nil when none ran). A session that moves off it
	// waits for them: until a report is applied, the lease API does not
	// know the proxy cools for the host and could lease it again.
	reporting int
	reported  chan struct{}
}

// proxyOf reads where a lease's proxy is and its credentials: the API's
// proxy.url carries them as userinfo.
func proxyOf(l *wire.Lease) (addr string, u *url.URL, auth string, err error) {
	u, err = url.Parse(l.Proxy.URL)
	if err != nil || u.Host == "" {
		return "", nil, "", fmt.Errorf("lease %s: proxy URL %q is not an absolute URL", l.LeaseID, l.Proxy.URL)
	}
	addr = u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), strconv.Itoa(int(l.Proxy.Port)))
	}
	if u.User != nil {
		p, _ := u.User.Password()
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+p))
	}
	return addr, u, auth, nil
}

// leases are the holdings and sessions of one gateway.
type leases struct {
	leaser Leaser
	opts   *Options
	now    func() time.Time

	mu       sync.Mutex
	held     map[*holding]struct{}
	sessions map[string]*session
	// perToken counts each token's sessions (by the token's hash).
	perToken map[[32]byte]int
	inFlight int
	// inFlightOf counts the requests and tunnels in flight of each token
	// (by its hash) and of each session (by its key).
	inFlightOf map[string]int
}

type session struct {
	h        *holding
	tokenSum [32]byte
	lastUsed time.Time
}

func newLeases(l Leaser, o *Options, now func() time.Time) *leases {
	return &leases{leaser: l, opts: o, now: now, held: map[*holding]struct{}{}, sessions: map[string]*session{}, perToken: map[[32]byte]int{},
		inFlightOf: map[string]int{}}
}

// acquire returns a holding for one request of token to host with o, and
// done, which the caller calls when the request ends.
func (ls *leases) acquire(ctx context.Context, token, username string, o UsernameOptions, host string) (*holding, func(), error) {
	slots, err := ls.takeSlots(token, username, o.Session != "")
	if err != nil {
		return nil, nil, err
	}
	var h *holding
	if o.Session == "" {
		h, err = ls.lease(ctx, token, o, host)
		if err == nil {
			ls.mu.Lock()
			h.refs = 1
			ls.held[h] = struct{}{}
			ls.mu.Unlock()
		}
	} else {
		h, err = ls.sessionHolding(ctx, token, username, o, host)
	}
	if err != nil {
		ls.freeSlots(slots)
		return nil, nil, err
	}
	var once sync.Once
	return h, func() {
		once.Do(func() {
			ls.freeSlots(slots)
			ls.unref(h)
		})
	}, nil
}

// takeSlots counts one more request in flight in the gateway, of token and,
// with session, of its session, unless one of them is at its bound (busy).
// It returns the keys to give to freeSlots when the request ends.
func (ls *leases) takeSlots(token, username string, session bool) ([]string, error) {
	tokenSum := sha256.Sum256([]byte(token))
	keys := []string{"t" + string(tokenSum[:])}
	bounds := []int{ls.opts.inFlightPerToken()}
	if session {
		key, _ := sessionKey(token, username)
		keys, bounds = append(keys, "s"+key), append(bounds, ls.opts.MaxInFlightPerSession)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.inFlight >= ls.opts.MaxInFlight {
		return nil, &Error{Reason: ReasonBusy, Message: fmt.Sprintf("the gateway serves %d requests and tunnels, its maximum (--gateway-max-in-flight)", ls.opts.MaxInFlight), RetryAfter: defaultRetryAfter}
	}
	for i, k := range keys {
		if ls.inFlightOf[k] >= bounds[i] {
			flag := [...]string{"--gateway-max-in-flight-per-token", "--gateway-max-in-flight-per-session"}[i]
			who := [...]string{"this token", "this session"}[i]
			return nil, &Error{Reason: ReasonBusy, Message: fmt.Sprintf("%s has %d requests and tunnels in flight, its maximum (%s)", who, bounds[i], flag), RetryAfter: defaultRetryAfter}
		}
	}
	ls.inFlight++
	for _, k := range keys {
		ls.inFlightOf[k]++
	}
	return keys, nil
}

// freeSlots ends what takeSlots counted.
func (ls *leases) freeSlots(keys []string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.inFlight--
	for _, k := range keys {
		if ls.inFlightOf[k]--; ls.inFlightOf[k] == 0 {
			delete(ls.inFlightOf, k)
		}
	}
}

// lease asks the Leaser for a lease for host.
func (ls *leases) lease(ctx context.Context, token string, o UsernameOptions, host string) (*holding, error) {
	req := wire.AcquireRequest{Namespace: o.Namespace, Selector: o.Selector, Target: host,
		TTLSeconds: int64(ls.opts.LeaseTTL / time.Second), WaitSeconds: int64(o.Wait / time.Second), Priority: o.Priority}
	l, err := ls.leaser.Acquire(ctx, token, req)
	if err != nil {
		return nil, err
	}
	addr, u, auth, err := proxyOf(l)
	if err != nil {
		ls.release(token, l.LeaseID)
		return nil, &Error{Reason: ReasonUpstream, Message: err.Error()}
	}
	traffic, end := context.WithCancel(context.Background())
	return &holding{token: token, id: l.LeaseID, traffic: traffic, endTraffic: end, proxyAddr: addr, proxyURL: u, auth: auth, expires: l.ExpiresAt,
		checked: map[string]bool{host: true}}, nil
}

func sessionKey(token, username string) (string, [32]byte) {
	sum := sha256.Sum256([]byte(token))
	return string(sum[:]) + "\x00" + username, sum
}

// sessionHolding is the session's lease, leased now if the session has none
// or its proxy cools for host (the session moves).
func (ls *leases) sessionHolding(ctx context.Context, token, username string, o UsernameOptions, host string) (*holding, error) {
	key, sum := sessionKey(token, username)
	ls.mu.Lock()
	var reported <-chan struct{}
	for asked := 0; ; asked++ {
		s := ls.sessions[key]
		if s == nil {
			break
		}
		if !s.h.cooling[host] {
			checked := s.h.checked[host]
			if !checked {
				if asked == maxSessionChecks {
					ls.mu.Unlock()
					return nil, &Error{Reason: ReasonBusy, Message: "this session's lease changed during each of its checks: retry", RetryAfter: defaultRetryAfter}
				}
				ls.mu.Unlock()
				cooling := ls.coolsFor(ctx, s.h, host)
				if err := ctx.Err(); err != nil {
					return nil, err // the client left: no answer moves the session
				}
				ls.mu.Lock()
				if ls.sessions[key] != s {
					continue // moved or ended meanwhile: look again
				}
				if checked = !cooling; checked {
					remember(&s.h.checked, host)
				} else {
					remember(&s.h.cooling, host)
				}
			}
			if checked {
				s.h.refs++
				s.lastUsed = ls.now()
				h := s.h
				ls.mu.Unlock()
				return h, nil
			}
		}
		if s.h.reporting > 0 {
			reported = s.h.reported
		}
		ls.endSessionLocked(key, s)
		break
	}
	if ls.perToken[sum] >= ls.opts.MaxSessionsPerToken {
		ls.mu.Unlock()
		return nil, &Error{Reason: ReasonBusy, Message: fmt.Sprintf("this token holds %d sessions, its maximum (--gateway-max-sessions-per-token); idle ones end after %s", ls.opts.MaxSessionsPerToken, ls.opts.SessionIdle), RetryAfter: ls.opts.SessionIdle}
	}
	ls.perToken[sum]++ // held for the session being made
	ls.mu.Unlock()
	h, err := ls.leaseAfter(ctx, reported, token, o, host)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if err != nil {
		ls.perToken[sum]--
		if ls.perToken[sum] == 0 {
			delete(ls.perToken, sum)
		}
		return nil, err
	}
	ls.held[h] = struct{}{}
	if s := ls.sessions[key]; s != nil {
		// A concurrent request made the session first: use its lease if it
		// is known good for host, else this request keeps its own.
		ls.perToken[sum]--
		if !s.h.checked[host] || s.h.cooling[host] {
			h.refs = 1
			return h, nil
		}
		h.refs = 0
		ls.dropLocked(h)
		s.h.refs++
		s.lastUsed = ls.now()
		return s.h, nil
	}
	h.sessionKey = key
	h.refs = 2 // the session's and this request's
	ls.sessions[key] = &session{h: h, tokenSum: sum, lastUsed: ls.now()}
	return h, nil
}

// endSessionLocked ends the session: its lease is released once no request
// uses it.
func (ls *leases) endSessionLocked(key string, s *session) {
	delete(ls.sessions, key)
	ls.perToken[s.tokenSum]--
	if ls.perToken[s.tokenSum] == 0 {
		delete(ls.perToken, s.tokenSum)
	}
	s.h.sessionKey = ""
	s.h.refs--
	if s.h.refs == 0 {
		ls.dropLocked(s.h)
	}
}

func (ls *leases) unref(h *holding) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	h.refs--
	if h.refs == 0 {
		ls.dropLocked(h)
	}
}

// dropLocked forgets h and releases its lease in the background.
func (ls *leases) dropLocked(h *holding) {
	if _, ok := ls.held[h]; !ok {
		return
	}
	delete(ls.held, h)
	h.endTraffic()
	go ls.release(h.token, h.id)
}

// release gives a lease back; a lease that already ended needs nothing.
func (ls *leases) release(token, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), ls.opts.APITimeout)
	defer cancel()
	_ = ls.leaser.Release(ctx, token, id)
}

// leaseAfter is lease once reported (nil: at once) is closed: the reports
// that made the session move are applied, so the new lease is not the
// cooled proxy's. Reports are bounded by --gateway-api-timeout.
func (ls *leases) leaseAfter(ctx context.Context, reported <-chan struct{}, token string, o UsernameOptions, host string) (*holding, error) {
	if reported != nil {
		select {
		case <-reported:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ls.lease(ctx, token, o, host)
}

// maxSessionChecks bounds how often one request asks the lease API about
// its session's lease when the session keeps changing meanwhile.
const maxSessionChecks = 4

// coolsFor asks the lease API whether h's proxy cools for host. An answer
// that is not a clear no (the lease ended, the API unreachable) counts as a
// yes: the session moves, and its new lease is checked as it is granted.
func (ls *leases) coolsFor(ctx context.Context, h *holding, host string) bool {
	ctx, cancel := context.WithTimeout(ctx, ls.opts.APITimeout)
	defer cancel()
	l, err := ls.leaser.GetFor(ctx, h.token, h.id, host)
	return err != nil || l.CoolingUntil != nil
}

// remember adds host to *set, up to maxCoolingHosts hosts: past it a
// session's cooling hosts are left to the lease API's grants, and its
// checked ones are asked again at each use.
func remember(set *map[string]bool, host string) {
	if *set == nil {
		*set = map[string]bool{}
	}
	if len(*set) < maxCoolingHosts {
		(*set)[host] = true
	}
}

// cool records that h's proxy was reported rate limited for host, so that
// its session moves for host, and counts the report in flight until done
// is called: a session moving off h waits for it.
func (ls *leases) cool(h *holding, host string) (done func()) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	remember(&h.cooling, host)
	if h.reporting == 0 {
		h.reported = make(chan struct{})
	}
	h.reporting++
	return func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if h.reporting--; h.reporting == 0 {
			close(h.reported)
		}
	}
}

// maxCoolingHosts bounds what a session remembers; past it the API's own
// cooldowns still apply to every new lease.
const maxCoolingHosts = 1024

// snapshot is what upstream requests read of h.
func (ls *leases) snapshot(h *holding) (addr string, u *url.URL, auth string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return h.proxyAddr, h.proxyURL, h.auth
}

// trafficCheck is how often the gateway renews a lease that carries
// tunnels or requests (at least): a renewal is how it learns that the lease
// ended elsewhere (deleted by its holder through the API, its proxy gone),
// and then it ends that traffic (endLocked). With the tick, within 30 s.
const trafficCheck = 20 * time.Second

// tickEvery is how often Run calls tick: a quarter of the shortest of the
// lease TTL and the session idle time, and at most trafficCheck/4.
func (o *Options) tickEvery() time.Duration {
	return min(o.LeaseTTL/4, o.SessionIdle/4, trafficCheck/4)
}

// tick renews the leases that expire within half a TTL (those carrying
// traffic every trafficCheck), ends the sessions idle for SessionIdle, and
// ends the traffic of leases that ended or expired.
func (ls *leases) tick(ctx context.Context) {
	now := ls.now()
	var due []*holding
	ls.mu.Lock()
	for key, s := range ls.sessions {
		if now.Sub(s.lastUsed) >= ls.opts.SessionIdle {
			ls.endSessionLocked(key, s)
		}
	}
	for h := range ls.held {
		left := h.expires.Sub(now)
		switch {
		case left <= 0:
			// Renewals failed until it expired (the API unreachable): it
			// is over.
			ls.endLocked(h)
		case left <= ls.opts.LeaseTTL/2, h.inFlight() > 0 && left <= ls.opts.LeaseTTL-trafficCheck:
			due = append(due, h)
		}
	}
	ls.mu.Unlock()
	for _, h := range due {
		rctx, cancel := context.WithTimeout(ctx, ls.opts.APITimeout)
		l, err := ls.leaser.Renew(rctx, h.token, h.id, ls.opts.LeaseTTL)
		cancel()
		ls.mu.Lock()
		switch {
		case err == nil:
			if addr, u, auth, perr := proxyOf(l); perr == nil {
				h.proxyAddr, h.proxyURL, h.auth = addr, u, auth
			}
			h.expires = l.ExpiresAt
		case client.IsLeaseEnded(err) || client.IsUnknownLease(err):
			// Gone (released through the API, expired during an outage):
			// its traffic ends, a session leases anew.
			ls.endLocked(h)
		case client.IsUnauthorized(err) || client.IsForbidden(err):
			// The token no longer holds it (revoked, its rights removed):
			// its traffic ends now, not at the lease's expiry.
			ls.endLocked(h)
		}
		ls.mu.Unlock()
	}
}

// inFlight is the requests and tunnels using h (refs less the session's).
func (h *holding) inFlight() int {
	if h.sessionKey != "" {
		return h.refs - 1
	}
	return h.refs
}

// endLocked forgets h, whose lease is over, without releasing it: its
// session ends and its tunnels and requests stop.
func (ls *leases) endLocked(h *holding) {
	delete(ls.held, h) // first: ending the session then releases nothing
	if s := ls.sessions[h.sessionKey]; h.sessionKey != "" && s != nil && s.h == h {
		ls.endSessionLocked(h.sessionKey, s)
	}
	h.endTraffic()
}

// releaseAll ends every session and releases every lease (shutdown).
func (ls *leases) releaseAll() {
	ls.mu.Lock()
	held := ls.held
	ls.held, ls.sessions, ls.perToken = map[*holding]struct{}{}, map[string]*session{}, map[[32]byte]int{}
	ls.mu.Unlock()
	var wg sync.WaitGroup
	for h := range held {
		wg.Go(func() { ls.release(h.token, h.id) })
	}
	wg.Wait()
}
