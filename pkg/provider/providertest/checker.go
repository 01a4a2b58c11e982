package providertest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// The invariant checker: every result of the provider under test, whatever
// the case is about, is held to the contract.

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
