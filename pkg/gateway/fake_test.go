package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// fakeLeaser grants leases of its proxies in turn, records every call and
// fails the next call with nextErr when set.
type fakeLeaser struct {
	mu      sync.Mutex
	now     func() time.Time
	n       int
	calls   []string
	live    map[string]bool
	nextErr error
	// proxyAddr is where its leases' proxy is ("": 127.0.0.1:3128).
	proxyAddr string
	// renewErr fails every renewal of a lease.
	renewErr map[string]error
	// cooling are the targets every lease's proxy cools for.
	cooling map[string]bool
}

var _ Leaser = (*fakeLeaser)(nil)

func newFakeLeaser(now func() time.Time) *fakeLeaser {
	return &fakeLeaser{now: now, live: map[string]bool{}}
}

func (f *fakeLeaser) record(call string) error {
	f.calls = append(f.calls, call)
	err := f.nextErr
	f.nextErr = nil
	return err
}

func (f *fakeLeaser) lease(id string, ttl time.Duration) *wire.Lease {
	addr := f.proxyAddr
	if addr == "" {
		addr = "127.0.0.1:3128"
	}
	return &wire.Lease{LeaseID: id, Proxy: wire.Proxy{URL: "http://u-" + id + ":p@" + addr, Port: 3128},
		Credentials: &wire.Credentials{Username: "u-" + id, Password: "p"}, ExpiresAt: f.now().Add(ttl)}
}

func (f *fakeLeaser) Acquire(_ context.Context, token string, req wire.AcquireRequest) (*wire.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("acquire %s %s", token, req.Target)); err != nil {
		return nil, err
	}
	f.n++
	id := fmt.Sprintf("l%d", f.n)
	f.live[id] = true
	return f.lease(id, time.Duration(req.TTLSeconds)*time.Second), nil
}

func (f *fakeLeaser) Release(_ context.Context, token, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, id)
	return f.record("release " + id)
}

func (f *fakeLeaser) Report(_ context.Context, token, id, result, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record(fmt.Sprintf("report %s %s %s", id, result, target))
}

func (f *fakeLeaser) Renew(_ context.Context, token, id string, ttl time.Duration) (*wire.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("renew " + id); err != nil {
		return nil, err
	}
	if err := f.renewErr[id]; err != nil {
		return nil, err
	}
	return f.lease(id, ttl), nil
}

func (f *fakeLeaser) GetFor(_ context.Context, token, id, target string) (*wire.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record(fmt.Sprintf("get %s %s", id, target)); err != nil {
		return nil, err
	}
	l := f.lease(id, time.Minute)
	if f.cooling[target] {
		until := f.now().Add(time.Minute)
		l.CoolingUntil = &until
	}
	return l, nil
}

// coolFor makes every lease's proxy cool for target, as a report through
// another lease would.
func (f *fakeLeaser) coolFor(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cooling == nil {
		f.cooling = map[string]bool{}
	}
	f.cooling[target] = true
}

// liveIDs are the leases granted and not released.
func (f *fakeLeaser) liveIDs() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for id := range f.live {
		out[id] = true
	}
	return out
}

func (f *fakeLeaser) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// failRenewOf makes the renewals of lease id fail with err.
func (f *fakeLeaser) failRenewOf(id string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewErr == nil {
		f.renewErr = map[string]error{}
	}
	f.renewErr[id] = err
}
