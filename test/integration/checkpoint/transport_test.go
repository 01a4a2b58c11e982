package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// faultTransport sits between one replica's client and kube-apiserver and,
// on Secret requests only, kills the process at a chosen request or injects
// transient faults: a 500 or a 504 that never reached the server, or a
// request that reached it and whose answer was lost (a timeout).
type faultTransport struct {
	next http.RoundTripper

	mu  sync.Mutex
	rng *rand.Rand
	// killAfter: -1 off; n ≥ 0: n more Secret requests pass, then every
	// request fails (the process is dead).
	killAfter int
	dead      bool
	// p is the probability of a transient fault per Secret request.
	p      float64
	faults int
	// requests counts the Secret requests that reached kube-apiserver.
	requests int
	// failPath, failN: the next failN requests whose path ends in
	// failPath answer 500 without reaching the server.
	failPath string
	failN    int
}

var (
	errKilled     = errors.New("injected: the process was killed")
	errLostAnswer = errors.New("injected: timeout (the request reached kube-apiserver, its answer was lost)")
)

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/secrets") {
		return f.next.RoundTrip(req)
	}
	f.mu.Lock()
	if f.killAfter == 0 {
		f.dead = true
	}
	if f.dead {
		f.mu.Unlock()
		return nil, errKilled
	}
	if f.killAfter > 0 {
		f.killAfter--
	}
	mode := 0
	if f.failN > 0 && strings.HasSuffix(req.URL.Path, f.failPath) {
		f.failN--
		mode = 1
	}
	if mode == 0 && f.p > 0 && f.rng.Float64() < f.p {
		mode = 1 + f.rng.IntN(3)
		f.faults++
	}
	if mode != 1 && mode != 2 {
		f.requests++
	}
	f.mu.Unlock()
	switch mode {
	case 1:
		return statusResponse(req, http.StatusInternalServerError, "InternalError"), nil
	case 2:
		return statusResponse(req, http.StatusGatewayTimeout, "Timeout"), nil
	case 3:
		if resp, err := f.next.RoundTrip(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, errLostAnswer
	}
	return f.next.RoundTrip(req)
}

func (f *faultTransport) set(killAfter int, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killAfter, f.p = killAfter, p
}

func (f *faultTransport) counts() (faults, requests int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults, f.requests
}

// statusResponse is kube-apiserver's answer of a failure with code.
func statusResponse(req *http.Request, code int, reason string) *http.Response {
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected fault","reason":%q,"code":%d}`, reason, code)
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}
}

// faultClient is a client whose Secret requests go through a faultTransport.
func (e *env) faultClient(t *testing.T, seed uint64) (kubernetes.Interface, *faultTransport) {
	t.Helper()
	ft := &faultTransport{rng: rand.New(rand.NewPCG(seed, 7)), killAfter: -1}
	return clientThrough(t, e.cfg, func(rt http.RoundTripper) http.RoundTripper {
		ft.next = rt
		return ft
	}), ft
}

// clientThrough is a client of cfg whose requests go through wrap's
// RoundTripper, with no client-side rate limit (what the wrapper does is
// what is tested).
func clientThrough(t testing.TB, cfg *rest.Config, wrap func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Wrap(wrap)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// recorder records what a Checkpointer tells its Recorder.
type recorder struct {
	mu      sync.Mutex
	results []string
	current []time.Time
}

var _ checkpoint.Recorder = (*recorder)(nil)

func (r *recorder) LeaseCheckpointWrite(result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results = append(r.results, result)
}

// written counts the writes that wrote a checkpoint.
func (r *recorder) written() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, res := range r.results {
		if res == checkpoint.ResultWritten {
			n++
		}
	}
	return n
}

func (r *recorder) LeaseCheckpointCurrent(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.current = append(r.current, at)
}

// The writer tells its Recorder every write's result and when the
// checkpoint last held the store (the stale-checkpoint alert's gauge):
// moved by a write and by a check that found nothing changed, not by a
// failed write, and reset when the writer stops.
func TestCheckpointRecorder(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	kube, ft := e.faultClient(t, 1)
	clk := clocktesting.NewFakeClock(time.Now())
	store := newStore(t, clk)
	fill(t, store, 4, 4, 0)
	rec := &recorder{}
	o := checkpoint.DefaultOptions()
	o.SecretName, o.Namespace = "leases", e.ns
	c, err := checkpoint.New(o, checkpoint.Deps{Secrets: kube.CoreV1(), Store: store, Codec: proxylease.MetadataCodec{}, Clock: clk, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	t1 := clk.Now()
	if err := c.WriteIfChanged(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if err := c.WriteIfChanged(ctx); err != nil { // nothing changed: still current
		t.Fatal(err)
	}
	t2 := clk.Now()
	clk.Step(time.Second)
	if _, err := store.Acquire(lease.AcquireRequest{Target: "new", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ft.set(-1, 1) // every request fails
	if err := c.WriteIfChanged(ctx); err == nil {
		t.Fatal("a write with every request failing succeeded")
	}
	ft.set(-1, 0)
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	store.Freeze()
	if err := c.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if d := cmp.Diff([]string{checkpoint.ResultWritten, checkpoint.ResultFailed, checkpoint.ResultWritten}, rec.results); d != "" {
		t.Errorf("write results (-want +got):\n%s", d)
	}
	want := []time.Time{t1, t2, clk.Now(), {}}
	if d := cmp.Diff(want, rec.current); d != "" {
		t.Errorf("current times (-want +got):\n%s", d)
	}
}
