package fake

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/utils/clock"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// ProviderIDPrefix starts every providerID the fake issues.
const ProviderIDPrefix = "fake://"

// ProviderID returns the providerID the fake issues for an instance name.
func ProviderID(name string) string { return ProviderIDPrefix + name }

var _ provider.Provider = (*Provider)(nil)

// Call is one recorded call of a provider.Provider method.
type Call struct {
	// Op is provider.OpCreate, OpGet, OpDelete or OpList.
	Op string
	// Request is the request of a create (its Proxy deep-copied).
	Request provider.CreateRequest
	// ProviderID is the argument of get and delete, and the result of a
	// successful create.
	ProviderID string
	// Tag is the argument of list.
	Tag string
	// Err is the error the call returned.
	Err error
}

// Option configures a Provider.
type Option func(*Provider)

// WithClock sets the clock that stamps Instance.CreatedAt (default: real).
func WithClock(c clock.PassiveClock) Option { return func(p *Provider) { p.clock = c } }

// WithGetsUntilRunning sets how many Gets of a new instance report
// StateProvisioning before it turns StateRunning with an IP. 0 makes instances
// Running at creation; a negative n disables the automatic transition (use
// SetState). Default 1: the first Get after Create sees Provisioning, as a
// real provider's would.
func WithGetsUntilRunning(n int) Option { return func(p *Provider) { p.getsUntilRunning = n } }

// WithGetsUntilGone sets how many Gets of a deleted instance still report
// StateTerminated before it is gone (NotFound). Default 0: gone at once.
// While it lingers, ListByTag lists it and Create of its name returns its
// providerID, as a cloud that answers "already exists" would.
func WithGetsUntilGone(n int) Option { return func(p *Provider) { p.getsUntilGone = n } }

// WithDeletingState sets the state a deleted instance reports while it
// lingers (WithGetsUntilGone). Default StateTerminated; StateStopped is what
// Compute Engine shows (STOPPING) for an instance being deleted.
func WithDeletingState(s provider.InstanceState) Option {
	return func(p *Provider) { p.deletingState = s }
}

// Provider is the in-memory fake. The zero value is not usable; call New.
// All methods are safe for concurrent use.
type Provider struct {
	clock            clock.PassiveClock
	getsUntilRunning int
	getsUntilGone    int
	deletingState    provider.InstanceState

	mu        sync.Mutex
	instances map[string]*record // by providerID
	calls     []Call
	injected  map[string][]error // by op, consumed front first
	ipSeq     int
	// unreachable scopes are left out of ListByTag, which then reports
	// them in an *provider.IncompleteListError.
	unreachable map[string]bool
}

type record struct {
	inst provider.Instance
	req  provider.CreateRequest
	// manual stops automatic transitions once a test set the state.
	manual      bool
	getsLeft    int
	deleting    bool
	goneGetLeft int
}

// New returns an empty fake provider.
func New(opts ...Option) *Provider {
	p := &Provider{
		clock:            clock.RealClock{},
		getsUntilRunning: 1,
		deletingState:    provider.StateTerminated,
		instances:        map[string]*record{},
		injected:         map[string][]error{},
		unreachable:      map[string]bool{},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// InjectError queues err as the result of the next call of op (one of the
// provider.Op constants); each call consumes one queued entry, and a queued
// nil lets that call run normally. A call failed this way has no effect. An
// unknown op panics: it is a bug in the test, and a silently ignored injection
// would make the test pass for the wrong reason.
func (p *Provider) InjectError(op string, err error) {
	switch op {
	case provider.OpCreate, provider.OpGet, provider.OpDelete, provider.OpList:
	default:
		panic(fmt.Sprintf("fake.Provider.InjectError: unknown op %q", op))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.injected[op] = append(p.injected[op], err)
}

// nextInjected pops the next injected error of op. Callers hold mu.
func (p *Provider) nextInjected(op string) error {
	q := p.injected[op]
	if len(q) == 0 {
		return nil
	}
	p.injected[op] = q[1:]
	return q[0]
}

// Calls returns every call so far, oldest first.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// CallsOf returns the calls of one op, oldest first.
func (p *Provider) CallsOf(op string) []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Call
	for _, c := range p.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// ResetCalls forgets the recorded calls (instances and injected errors stay).
func (p *Provider) ResetCalls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
}

// Create implements provider.Provider.
func (p *Provider) Create(_ context.Context, req provider.CreateRequest) (id string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	recorded := req
	recorded.Proxy = req.Proxy.DeepCopy()
	defer func() {
		p.calls = append(p.calls, Call{Op: provider.OpCreate, Request: recorded, ProviderID: id, Err: err})
	}()

	if err := p.nextInjected(provider.OpCreate); err != nil {
		return "", err
	}
	if err := req.Validate(); err != nil {
		return "", err
	}
	id = ProviderID(req.Name)
	if _, exists := p.instances[id]; exists {
		return id, nil // idempotent: same name, same instance, untouched
	}
	r := &record{
		inst: provider.Instance{
			ProviderID: id,
			Name:       req.Name,
			Tag:        req.Tag,
			OwnerUID:   req.OwnerUID,
			SpecHash:   req.SpecHash,
			State:      provider.StateProvisioning,
			CreatedAt:  p.clock.Now(),
		},
		req:      recorded,
		getsLeft: p.getsUntilRunning,
		manual:   p.getsUntilRunning < 0,
	}
	if p.getsUntilRunning == 0 {
		p.run(r)
	}
	p.instances[id] = r
	return id, nil
}

// run makes r Running with an IP. Callers hold mu.
func (p *Provider) run(r *record) {
	r.inst.State = provider.StateRunning
	if r.inst.IP == "" {
		r.inst.IP = p.nextIP()
	}
}

// nextIP hands out documentation addresses (RFC 5737): never routable, so a
// test that probes a fake instance by mistake fails fast instead of reaching
// something real.
func (p *Provider) nextIP() string {
	nets := []string{"192.0.2", "198.51.100", "203.0.113"}
	n := p.ipSeq
	p.ipSeq++
	return fmt.Sprintf("%s.%d", nets[(n/254)%len(nets)], n%254+1)
}

// Get implements provider.Provider.
func (p *Provider) Get(_ context.Context, providerID string) (inst *provider.Instance, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		p.calls = append(p.calls, Call{Op: provider.OpGet, ProviderID: providerID, Err: err})
	}()

	if err := p.nextInjected(provider.OpGet); err != nil {
		return nil, err
	}
	r, ok := p.instances[providerID]
	if !ok {
		return nil, notFound(providerID)
	}
	switch {
	case r.deleting:
		if r.goneGetLeft <= 0 {
			delete(p.instances, providerID)
			return nil, notFound(providerID)
		}
		r.goneGetLeft--
	case r.inst.State == provider.StateProvisioning && !r.manual:
		if r.getsLeft > 0 {
			r.getsLeft--
		} else {
			p.run(r)
		}
	}
	out := r.inst
	return &out, nil
}

func notFound(providerID string) error {
	return provider.NotFound(fmt.Errorf("fake instance %q", providerID))
}

// Delete implements provider.Provider.
func (p *Provider) Delete(_ context.Context, providerID string) (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		p.calls = append(p.calls, Call{Op: provider.OpDelete, ProviderID: providerID, Err: err})
	}()

	if err := p.nextInjected(provider.OpDelete); err != nil {
		return err
	}
	r, ok := p.instances[providerID]
	if !ok || r.deleting {
		return nil // missing is success
	}
	if p.getsUntilGone <= 0 {
		delete(p.instances, providerID)
		return nil
	}
	r.deleting = true
	r.goneGetLeft = p.getsUntilGone
	r.inst.State = p.deletingState
	return nil
}

// ListByTag implements provider.Provider. Instances come sorted by name.
func (p *Provider) ListByTag(_ context.Context, tag string) (out []provider.Instance, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		p.calls = append(p.calls, Call{Op: provider.OpList, Tag: tag, Err: err})
	}()

	if err := p.nextInjected(provider.OpList); err != nil {
		return nil, err
	}
	out = []provider.Instance{}
	for _, r := range p.instances {
		if r.inst.Tag == tag && !p.unreachable[r.inst.Scope] {
			out = append(out, r.inst)
		}
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.Name, b.Name) })
	if len(p.unreachable) > 0 {
		var scopes []string
		for s := range p.unreachable {
			scopes = append(scopes, s)
		}
		return out, provider.Incomplete(scopes)
	}
	return out, nil
}

// Plant adds inst as it is, as an instance made outside this fake's Create
// would be (by a crashed operator, another deployment, a human): it may lack
// an OwnerUID or Tag, and carries its own CreatedAt and Scope. An empty
// ProviderID becomes ProviderID(inst.Name); a zero CreatedAt becomes now.
// Its state never changes by itself. It returns the providerID.
func (p *Provider) Plant(inst provider.Instance) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if inst.ProviderID == "" {
		inst.ProviderID = ProviderID(inst.Name)
	}
	if inst.CreatedAt.IsZero() {
		inst.CreatedAt = p.clock.Now()
	}
	if !inst.State.Known() {
		inst.State = provider.StateRunning
	}
	if inst.State == provider.StateRunning && inst.IP == "" {
		inst.IP = p.nextIP()
	}
	p.instances[inst.ProviderID] = &record{inst: inst, manual: true}
	return inst.ProviderID
}

// SetUnreachable makes scope (an Instance.Scope) unreadable or readable
// again: while unreachable, ListByTag omits its instances and returns the
// others with an *provider.IncompleteListError naming it, as a Compute
// Engine zone that does not answer would.
func (p *Provider) SetUnreachable(scope string, unreachable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if unreachable {
		p.unreachable[scope] = true
	} else {
		delete(p.unreachable, scope)
	}
}

// Instances returns every instance the fake holds, sorted by name, without
// recording a call or advancing any state.
func (p *Provider) Instances() []provider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]provider.Instance, 0, len(p.instances))
	for _, r := range p.instances {
		out = append(out, r.inst)
	}
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Instance returns one instance without recording a call or advancing state.
func (p *Provider) Instance(providerID string) (provider.Instance, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.instances[providerID]
	if !ok {
		return provider.Instance{}, false
	}
	return r.inst, true
}

// Request returns the CreateRequest that created an instance.
func (p *Provider) Request(providerID string) (provider.CreateRequest, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.instances[providerID]
	if !ok {
		return provider.CreateRequest{}, false
	}
	return r.req, true
}

// SetState forces an instance's state and stops its automatic transitions.
// StateRunning assigns an IP if it has none. It returns an ErrNotFound-class
// error for an unknown providerID.
func (p *Provider) SetState(providerID string, state provider.InstanceState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.instances[providerID]
	if !ok {
		return notFound(providerID)
	}
	if !state.Known() {
		return provider.Permanent(fmt.Errorf("fake: unknown state %q", state))
	}
	r.manual = true
	r.inst.State = state
	if state == provider.StateRunning && r.inst.IP == "" {
		r.inst.IP = p.nextIP()
	}
	return nil
}

// SetIP sets an instance's IP (e.g. a loopback address a test serves on).
func (p *Provider) SetIP(providerID, ip string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.instances[providerID]
	if !ok {
		return notFound(providerID)
	}
	r.inst.IP = ip
	return nil
}

// Remove makes an instance vanish without a Delete call, as an instance
// deleted out of band (preempted, removed by hand) would. It reports whether
// the instance existed.
func (p *Provider) Remove(providerID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.instances[providerID]
	delete(p.instances, providerID)
	return ok
}

// Providers is a fixed name → provider map with the Get of
// *provider.Registry, for a reconciler under test to look its providers up
// in (controller.Providers).
type Providers map[string]provider.Provider

// Get returns the provider named name, and false if none is.
func (s Providers) Get(name string) (provider.Provider, bool) {
	p, ok := s[name]
	return p, ok && p != nil
}
