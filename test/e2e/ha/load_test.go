package ha

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

const (
	// httpClients and kubeClients lease through each API at once.
	httpClients = 4
	kubeClients = 4
	// leaseTTL bounds how long a lease released after the last checkpoint
	// before a crash holds its proxy (it comes back with the checkpoint).
	leaseTTL  = 20
	leaseWait = 5
)

// recorder is what the clients lived: every grant, every lease found gone
// at its release, and when each client last got a successful answer.
type recorder struct {
	mu      sync.Mutex
	grants  []framework.Grant
	lost    []time.Time
	answers [][]time.Time // per client: each successful answer
	errs    map[string]int
	// samples: the first few errors of each kind, with when they came.
	samples map[string][]string
}

func newRecorder(clients int) *recorder {
	return &recorder{answers: make([][]time.Time, clients), errs: map[string]int{}, samples: map[string][]string{}}
}

func (r *recorder) answered(client int) {
	r.mu.Lock()
	r.answers[client] = append(r.answers[client], time.Now())
	r.mu.Unlock()
}

// samplesPerKind bounds the errors kept of each kind.
const samplesPerKind = 3

func (r *recorder) failed(kind string, err error) {
	r.mu.Lock()
	r.errs[kind]++
	if len(r.samples[kind]) < samplesPerKind {
		r.samples[kind] = append(r.samples[kind], time.Now().Format("15:04:05.000")+" "+err.Error())
	}
	r.mu.Unlock()
}

// retried says whether an error kind is one a client meets during a
// handover and retries: no replica serves yet (503), the connection went
// away with the old leader (transport), or no proxy freed within the wait.
// Any other (403, 401, 500, …) is a wrong answer.
func retried(kind string) bool {
	kind = strings.TrimSuffix(kind, releaseSuffix)
	switch kind {
	case "http " + wire.CodeNotLeader, "http " + wire.CodeUnavailable, "http transport",
		"http " + wire.CodeNoMatch, "http " + wire.CodeQueueFull,
		"kubernetes " + string(metav1.StatusReasonServiceUnavailable), "kubernetes " + string(metav1.StatusReasonConflict),
		"kubernetes " + string(metav1.StatusReasonTooManyRequests), "kubernetes " + string(metav1.StatusReasonTimeout),
		"kubernetes " + string(metav1.StatusReasonUnknown):
		return true
	}
	return false
}

// releaseSuffix marks the kind of an error met releasing.
const releaseSuffix = " (release)"

// door is one API's acquire and release, as a client uses it.
type door struct {
	// acquire returns the lease's ID, its proxy, and the name to release it by.
	acquire func(ctx context.Context) (id, proxy, name string, err error)
	// release says gone=true when the lease was no longer there.
	release func(ctx context.Context, name string) (gone bool, err error)
	// retry: the error is one a client retries (no replica serves now).
	kind func(err error) string
}

func (c *cluster) httpDoor(cl *dclient.Client) door {
	return door{
		acquire: func(ctx context.Context) (string, string, string, error) {
			l, err := cl.Acquire(ctx, wire.AcquireRequest{Namespace: crawlNS, Target: "ha", TTLSeconds: leaseTTL, WaitSeconds: leaseWait})
			if err != nil {
				return "", "", "", err
			}
			return l.LeaseID, l.Proxy.Name, l.LeaseID, nil
		},
		release: func(ctx context.Context, id string) (bool, error) {
			err := cl.Release(ctx, id)
			var apiErr *dclient.APIError
			if errors.As(err, &apiErr) && (apiErr.Code == wire.CodeUnknownLease || apiErr.Code == wire.CodeLeaseEnded) {
				return true, nil
			}
			return false, err
		},
		kind: func(err error) string {
			var apiErr *dclient.APIError
			if errors.As(err, &apiErr) {
				return "http " + apiErr.Code
			}
			return "http transport"
		},
	}
}

func (c *cluster) kubeDoor() door {
	leases := c.leasing.LeasingV1alpha1().ProxyLeases(crawlNS)
	return door{
		acquire: func(ctx context.Context) (string, string, string, error) {
			pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "ha-"},
				Spec: leasingv1alpha1.ProxyLeaseSpec{Target: "ha", TTLSeconds: ptr.To[int32](leaseTTL), WaitSeconds: leaseWait}}
			got, err := leases.Create(ctx, pl, metav1.CreateOptions{})
			if err != nil {
				return "", "", "", err
			}
			if got.Status.Proxy == nil {
				return "", "", "", fmt.Errorf("ProxyLease %s granted without a proxy", got.Name)
			}
			return got.Status.LeaseID, got.Status.Proxy.Name, got.Name, nil
		},
		release: func(ctx context.Context, name string) (bool, error) {
			err := leases.Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		},
		kind: func(err error) string {
			return fmt.Sprintf("kubernetes %s", apierrors.ReasonForError(err))
		},
	}
}

// drive runs the clients until ctx ends: each acquires (waiting up to
// leaseWait), holds 20-60 ms and releases, retrying what fails. wait
// returns once every client stopped.
func drive(ctx context.Context, doors []door, rec *recorder, seed uint64) (wait func()) {
	var wg sync.WaitGroup
	for i, d := range doors {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				id, proxy, name, err := d.acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						rec.failed(d.kind(err), err)
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				rec.answered(i)
				g := framework.Grant{ID: id, Proxy: proxy, Got: time.Now()}
				time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond)
				// Release, retrying until an answer: the lease is held
				// until then. Bounded: past the lease's TTL it is gone.
				deadline := time.Now().Add(leaseTTL * time.Second)
				for time.Now().Before(deadline) {
					g.Ended = time.Now()
					rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					gone, err := d.release(rctx, name)
					cancel()
					if err == nil {
						rec.answered(i)
						rec.mu.Lock()
						if gone {
							rec.lost = append(rec.lost, g.Ended)
						}
						rec.grants = append(rec.grants, g)
						rec.mu.Unlock()
						break
					}
					rec.failed(d.kind(err)+releaseSuffix, err)
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	return wg.Wait
}

// window is a phase of the run: what happened from From to To.
type window struct {
	Name     string
	From, To time.Time
}

// phaseFigures are the figures of one phase.
type phaseFigures struct {
	Took time.Duration
	// Grants made in the phase; Lost: leases found gone at release.
	Grants, Lost int
	// LongestGap is the longest time a client went without a successful
	// answer, over gaps that overlap the phase.
	LongestGap time.Duration
	// Unavailable is how long the APIService was not Available.
	Unavailable time.Duration
}

func (r *recorder) figures(w window, unavailable []window) phaseFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := phaseFigures{Took: w.To.Sub(w.From)}
	for _, g := range r.grants {
		if !g.Got.Before(w.From) && g.Got.Before(w.To) {
			f.Grants++
		}
	}
	for _, at := range r.lost {
		if !at.Before(w.From) && at.Before(w.To) {
			f.Lost++
		}
	}
	for _, times := range r.answers {
		// The client's answers around and in the phase: the last before it,
		// those in it, the first after it; a gap that overlaps the phase
		// counts whole.
		points := []time.Time{w.From}
		var after *time.Time
		for _, at := range times {
			switch {
			case !at.After(w.From):
				points[0] = at
			case at.Before(w.To):
				points = append(points, at)
			case after == nil:
				after = &at
			}
		}
		if after != nil {
			points = append(points, *after)
		} else {
			points = append(points, w.To)
		}
		slices.SortFunc(points, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(points); i++ {
			f.LongestGap = max(f.LongestGap, points[i].Sub(points[i-1]))
		}
	}
	for _, u := range unavailable {
		from, to := maxTime(u.From, w.From), minTime(u.To, w.To)
		if to.After(from) {
			f.Unavailable += to.Sub(from)
		}
	}
	return f
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// watchAPIService samples the APIService's Available condition every 100 ms
// until ctx ends; stop returns the spans it was not Available.
func (c *cluster) watchAPIService(ctx context.Context) (stop func() []window) {
	var mu sync.Mutex
	var spans []window
	var down *window
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ok, why := c.apiServiceCondition(qctx)
			cancel()
			now := time.Now()
			mu.Lock()
			switch {
			case !ok && down == nil && ctx.Err() == nil:
				down = &window{Name: why, From: now}
			case ok && down != nil:
				down.To = now
				spans = append(spans, *down)
				down = nil
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() []window {
		<-done
		mu.Lock()
		defer mu.Unlock()
		if down != nil {
			down.To = time.Now()
			spans = append(spans, *down)
		}
		return spans
	}
}
