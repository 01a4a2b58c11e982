package fairnesse2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// TestHTTPCrawlersAlternate: two crawlers of the HTTP discovery API, each
// with its own bearer token and looping acquire (waitSeconds) → hold 50ms →
// release on the one exclusive proxy, are served in turn. Their requests
// name no flow: each token's identity is its flow.
func TestHTTPCrawlersAlternate(t *testing.T) {
	checkHolders(t)
	workers := []string{identityA, identityB}
	assertFair(t, workers, contend(t, workers, httpAcquirer(workers)))
}

// checkHolders shows that the two tokens really are two identities: a lease
// acquired with each is held by "http:<its identity>", as the aggregated
// API's view of the lease store reports (the flow is the holder's identity).
func checkHolders(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	hc := newHTTPClient()
	got := map[string]string{}
	for _, id := range httpIdentities {
		a, err := postLease(ctx, hc, id, leaseRequest(0))
		if err != nil {
			t.Fatal(err)
		}
		l, err := granted(a)
		if err != nil {
			t.Fatal(err)
		}
		list, err := shared.leasing.LeasingV1alpha1().ProxyLeases(testNamespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector(leasingv1alpha1.FieldLeaseID, l.LeaseID).String(),
		})
		if err != nil {
			t.Fatalf("listing the ProxyLease of lease %s: %v", l.LeaseID, err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("lease %s: %d ProxyLeases, want 1", l.LeaseID, len(list.Items))
		}
		got[id] = list.Items[0].Status.HolderIdentity
		if err := deleteLease(ctx, hc, id, l.LeaseID); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{identityA: leasing.HTTPHolderPrefix + identityA, identityB: leasing.HTTPHolderPrefix + identityB}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("holders of the leases acquired with each token (-want +got):\n%s", d)
	}
}

// TestHTTPGreedyCrawlerGetsNoMoreTurns: a crawler with two workers (two
// requests outstanding most of the time; identityA) against a crawler with
// one (identityB) still alternates: fairness is between flows, not
// requests. With one worker each, first-come-first-served alternates as
// well; this case tells them apart.
//
// It is the case that found the one-slot round-robin defect of
// pkg/flowcontrol (holders BAABAAB…): the polite crawler's next request
// always reaches the queue after its release was dispatched, and a flow that
// started waiting used to join the back of the round-robin, behind the
// greedy crawler served after it. pkg/flowcontrol now remembers an idle
// flow's turn (TestTiedFlowsTakeTurnsOnOneProxy is the unit version).
func TestHTTPGreedyCrawlerGetsNoMoreTurns(t *testing.T) {
	workers := []string{identityA, identityA, identityB}
	assertFair(t, workers, contend(t, workers, httpAcquirer(workers)))
}

// httpAcquirer acquires over the HTTP API with the crawler's token (the
// crawler's name is its identity), with one connection pool per crawler.
func httpAcquirer(workers []string) acquirer {
	clients := map[string]*http.Client{}
	for _, n := range workers {
		clients[n] = newHTTPClient()
	}
	return func(ctx context.Context, crawler string) (func(context.Context) error, error) {
		hc := clients[crawler]
		a, err := postLease(ctx, hc, crawler, leaseRequest(waitSeconds))
		if err != nil {
			return nil, err
		}
		l, err := granted(a)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return deleteLease(ctx, hc, crawler, l.LeaseID) }, nil
	}
}

// TestWaiterGrantedWithinMillisecondsOfRelease: a request blocked in POST
// /v1/leases (waitSeconds=10) is answered within milliseconds of the release
// that frees the proxy — the release itself dispatches it, no polling tick.
// Repeated 10 times, each granted waiter becoming the next holder.
func TestWaiterGrantedWithinMillisecondsOfRelease(t *testing.T) {
	// Generous for a loaded 2-core machine; typical values are ~1ms.
	const bound = 250 * time.Millisecond
	const repeats = 10
	ctx := context.Background()
	holderClient, waiterClient := newHTTPClient(), newHTTPClient()
	// Holder and waiter are one flow (identityA), so only the release frees
	// capacity for the waiter.
	a, err := postLease(ctx, holderClient, identityA, leaseRequest(waitSeconds))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := granted(a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = deleteLease(ctx, holderClient, identityA, holder.LeaseID) }()

	var afterReturn, afterSend []time.Duration
	for i := range repeats {
		done := make(chan httpAnswer, 1)
		errs := make(chan error, 1)
		go func() {
			a, err := postLease(ctx, waiterClient, identityA, leaseRequest(waitSeconds))
			if err != nil {
				errs <- err
				return
			}
			done <- a
		}()
		// The waiter is in the queue (not merely on its way) before the release.
		waitQueued(t, 1)
		select {
		case a := <-done:
			t.Fatalf("round %d: the waiter was answered while the proxy was held: %s", i, a)
		case err := <-errs:
			t.Fatalf("round %d: %v", i, err)
		default:
		}
		releaseSent := time.Now()
		if err := deleteLease(ctx, holderClient, identityA, holder.LeaseID); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		releaseReturned := time.Now()
		var ans httpAnswer
		select {
		case ans = <-done:
		case err := <-errs:
			t.Fatalf("round %d: waiter: %v", i, err)
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: the waiter was not answered 15s after the release", i)
		}
		l, err := granted(ans)
		if err != nil {
			t.Fatalf("round %d: waiter: %v", i, err)
		}
		holder = l
		if ans.at.Before(releaseSent) {
			t.Fatalf("round %d: the waiter's answer arrived before the release was sent", i)
		}
		// Negative when the waiter's answer beats the DELETE's own: the grant
		// is made while the release is handled.
		d := ans.at.Sub(releaseReturned)
		afterReturn = append(afterReturn, d)
		afterSend = append(afterSend, ans.at.Sub(releaseSent))
		t.Logf("round %d: waiter answered %s after the DELETE returned (%s after it was sent)", i, d, ans.at.Sub(releaseSent))
		if d >= bound {
			t.Errorf("round %d: waiter answered %s after the release, want < %s", i, d, bound)
		}
	}
	p50, maxD := quantiles(afterReturn)
	p50s, maxS := quantiles(afterSend)
	t.Logf("release → waiter's answer over %d rounds: from DELETE returned p50 %s max %s; from DELETE sent p50 %s max %s",
		repeats, p50, maxD, p50s, maxS)
}

// TestFullQueueAnswers429: over the per-flow queue limit (2) a waiting
// request is rejected at once with 429, Retry-After (the configured 3s) and
// the JSON error body; another flow is still queued (the limit is per flow).
// identityB holds the proxy, identityA fills its queue, then identityB's own
// waiting request is the other flow.
func TestFullQueueAnswers429(t *testing.T) {
	ctx := context.Background()
	hc := newHTTPClient()
	a, err := postLease(ctx, hc, identityB, leaseRequest(0))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := granted(a)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if err := deleteLease(ctx, hc, identityB, holder.LeaseID); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()

	// Waiters release as soon as they are granted, so one release drains them.
	results := make(chan error, queueMaxPerFlow+1)
	wait := func(identity string) {
		a, err := postLease(ctx, newHTTPClient(), identity, leaseRequest(20))
		if err == nil {
			var l *wire.Lease
			if l, err = granted(a); err == nil {
				err = deleteLease(ctx, hc, identity, l.LeaseID)
			}
		}
		results <- err
	}
	for range queueMaxPerFlow {
		go wait(identityA)
	}
	waitQueued(t, queueMaxPerFlow)

	rejectedBefore, httpRejectedBefore := metric(t, rejectedCapacity), metric(t, httpRejected)
	sent := time.Now()
	over, err := postLease(ctx, hc, identityA, leaseRequest(20))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(sent)
	if over.code != http.StatusTooManyRequests {
		t.Fatalf("over the per-flow limit: %s, want 429", over)
	}
	if took > 2*time.Second {
		t.Errorf("the 429 took %s; a full queue must reject at once, not wait", took)
	}
	if got, want := over.header.Get("Retry-After"), strconv.Itoa(int(queueRetryAfter/time.Second)); got != want {
		t.Errorf("Retry-After = %q, want %q (--lease-queue-retry-after)", got, want)
	}
	if ct := over.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var body wire.Error
	if err := json.Unmarshal(over.body, &body); err != nil {
		t.Fatalf("429 body %q is not the JSON error: %v", over.body, err)
	}
	if body.Error != wire.CodeQueueFull || body.Message == "" {
		t.Errorf("429 body %+v, want error %q and a message", body, wire.CodeQueueFull)
	}
	if d := metric(t, rejectedCapacity) - rejectedBefore; d != 1 {
		t.Errorf("%s grew by %v, want 1", rejectedCapacity, d)
	}
	if d := metric(t, httpRejected) - httpRejectedBefore; d != 1 {
		t.Errorf("%s grew by %v, want 1", httpRejected, d)
	}

	// Negative control: the limit is the flow's, not the band's — another
	// flow still queues.
	go wait(identityB)
	waitQueued(t, queueMaxPerFlow+1)

	release()
	for range queueMaxPerFlow + 1 {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("queued waiter: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a queued waiter was not granted after the release")
		}
	}
}
