package fairnesse2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// Settings of the contention tests.
const (
	// rounds each crawler acquires, holds and releases.
	rounds = 20
	// hold is how long a crawler keeps each lease.
	hold = 50 * time.Millisecond
	// waitSeconds of every waiting request: far above any expected wait, so
	// a request that runs out shows a lost wake-up.
	waitSeconds = 10
)

// Series of the operator's /metrics the tests read.
const (
	queueLengthBand0 = `proxy_operator_flowcontrol_queue_length{band="0"}`
	rejectedCapacity = `proxy_operator_flowcontrol_requests_total{outcome="rejected_capacity"}`
	httpRejected     = `proxy_operator_lease_requests_total{api="http",outcome="rejected"}`
)

// The test Proxy's attribute every lease selects on.
const selectorKey, selector = "pool", "fairness"

// The identities of the discovery API's two bearer tokens (the token file's
// "token,identity" lines). Each is a fairness flow of its own, named
// "http:<identity>" (leasing.HTTPHolderPrefix), like the holder of its leases.
const (
	identityA = "crawler-a"
	identityB = "crawler-b"
)

var httpIdentities = []string{identityA, identityB}

// newHTTPClient is one crawler's client: its own connection pool.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
}

// leaseRequest is an acquire of the test proxy that waits up to wait
// seconds. It names no flow: the flow is the token's identity.
func leaseRequest(wait int64) wire.AcquireRequest {
	return wire.AcquireRequest{
		Namespace:   testNamespace,
		Selector:    map[string]string{selectorKey: selector},
		Target:      "example.com",
		TTLSeconds:  60,
		WaitSeconds: wait,
	}
}

// httpAnswer is a response of the discovery API, read fully.
type httpAnswer struct {
	code   int
	header http.Header
	body   []byte
	// at is when the response headers arrived.
	at time.Time
}

func (a httpAnswer) String() string { return fmt.Sprintf("%d %s", a.code, bytes.TrimSpace(a.body)) }

// postLease sends POST /v1/leases with identity's token.
func postLease(ctx context.Context, hc *http.Client, identity string, req wire.AcquireRequest) (httpAnswer, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return httpAnswer{}, err
	}
	return call(ctx, hc, identity, http.MethodPost, shared.discovery+"/v1/leases", data)
}

// deleteLease sends DELETE /v1/leases/{id} with identity's token and wants 204.
func deleteLease(ctx context.Context, hc *http.Client, identity, id string) error {
	a, err := call(ctx, hc, identity, http.MethodDelete, shared.discovery+"/v1/leases/"+id, nil)
	if err != nil {
		return err
	}
	if a.code != http.StatusNoContent {
		return fmt.Errorf("DELETE lease %s: %s, want 204", id, a)
	}
	return nil
}

func call(ctx context.Context, hc *http.Client, identity, method, url string, body []byte) (httpAnswer, error) {
	token, ok := shared.tokens[identity]
	if !ok {
		return httpAnswer{}, fmt.Errorf("no token for identity %q", identity)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return httpAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return httpAnswer{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	at := time.Now()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpAnswer{}, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	return httpAnswer{code: resp.StatusCode, header: resp.Header, body: data, at: at}, nil
}

// granted decodes a 201 answer and checks it leases the test proxy.
func granted(a httpAnswer) (*wire.Lease, error) {
	if a.code != http.StatusCreated {
		return nil, fmt.Errorf("POST /v1/leases: %s, want 201", a)
	}
	var l wire.Lease
	if err := json.Unmarshal(a.body, &l); err != nil {
		return nil, fmt.Errorf("decoding the lease %q: %w", a.body, err)
	}
	if l.LeaseID == "" || l.Proxy.Name != proxyName || l.Proxy.Namespace != testNamespace {
		return nil, fmt.Errorf("lease %+v, want an ID and proxy %s/%s", l, testNamespace, proxyName)
	}
	return &l, nil
}

// acquirer acquires one lease for crawler, blocking while it waits, and
// returns the function that releases it.
type acquirer func(ctx context.Context, crawler string) (release func(context.Context) error, err error)

// contend runs one goroutine per worker, all started together; workers
// names each worker's crawler (a crawler with two workers appears twice and
// has two requests outstanding at times). Each worker does rounds × (acquire,
// hold, release). It returns every grant with its client-side times, or
// fails the test on the first error.
func contend(t *testing.T, workers []string, acquire acquirer) []grant {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var grants []grant
	g, gctx := errgroup.WithContext(ctx)
	startGate := make(chan struct{})
	for w, name := range workers {
		g.Go(func() error {
			<-startGate
			for i := range rounds {
				sent := time.Now()
				release, err := acquire(gctx, name)
				if err != nil {
					return fmt.Errorf("%s (worker %d) round %d: %w", name, w, i, err)
				}
				got := time.Now()
				time.Sleep(hold)
				releaseSent := time.Now()
				if err := release(gctx); err != nil {
					return fmt.Errorf("%s (worker %d) round %d: %w", name, w, i, err)
				}
				mu.Lock()
				grants = append(grants, grant{crawler: name, sent: sent, granted: got, releaseSent: releaseSent, released: time.Now()})
				mu.Unlock()
			}
			return nil
		})
	}
	close(startGate)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return grants
}

// assertFair checks and logs a contention run of workers (see contend):
// every worker got all its rounds, checkGrants finds nothing, and
// windowImbalance is at most 1.
func assertFair(t *testing.T, workers []string, grants []grant) {
	t.Helper()
	names := slices.Compact(slices.Sorted(slices.Values(workers)))
	seq := holders(grants, names)
	var legend []string
	for i, n := range names {
		legend = append(legend, fmt.Sprintf("%c=%s×%d", 'A'+i, n, countOf(workers, n)))
	}
	t.Logf("holders in grant order (%s): %s", strings.Join(legend, ", "), seq)
	var waits []time.Duration
	for _, g := range grants {
		waits = append(waits, g.granted.Sub(g.sent))
	}
	p50, maxWait := quantiles(waits)
	t.Logf("time from request to grant: p50 %s, max %s (a hold is %s)", p50, maxWait, hold)
	for i, name := range names {
		if n, want := strings.Count(seq, string(rune('A'+i))), rounds*countOf(workers, name); n != want {
			t.Errorf("%s got %d grants, want %d", name, n, want)
		}
	}
	for _, v := range checkGrants(grants) {
		t.Errorf("%s at grant %d: %s", v.Kind, v.At, v.Detail)
	}
	if imb, counts := windowImbalance(grants, names); imb > 1 {
		t.Errorf("while all crawlers contended they got %v grants: imbalance %d, want at most 1", counts, imb)
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// quantiles returns the median and the maximum of ds.
func quantiles(ds []time.Duration) (p50, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}

// scrape reads the operator's /metrics into series → value, the series
// being the text before the value ("name{labels}").
func scrape(t testing.TB) map[string]float64 {
	t.Helper()
	code, body, err := httpGet(shared.metrics, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("scraping %s: %d %v", shared.metrics, code, err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// metric returns one series; a missing series fails the test (every series
// these tests read exists from start-up or from the first request).
func metric(t testing.TB, series string) float64 {
	t.Helper()
	v, ok := scrape(t)[series]
	if !ok {
		t.Fatalf("metric %s not exposed", series)
	}
	return v
}

// waitQueued waits until band 0 of the wait queue holds n requests: the
// waiters under test have reached the queue.
func waitQueued(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, ok := scrape(t)[queueLengthBand0]
		if ok && v == float64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (exposed %v), want %d", queueLengthBand0, v, ok, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
