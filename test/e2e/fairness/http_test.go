package fairnesse2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// TestHTTPCrawlersAlternate: two crawlers of the HTTP discovery API, each
// looping acquire (waitSeconds) → hold 50ms → release on the one exclusive
// proxy, are served in turn.
//
// The two crawlers are two flows under ONE bearer token, told apart by the
// request's explicit "flow" field (flows "http:<identity>/crawler-a" and
// "…/crawler-b"): the operator accepts a single token (--discovery-token-file
// or $PROXY_OPERATOR_DISCOVERY_TOKEN; app.setupLeasing passes
// discovery.SingleToken), although discovery.Options.Tokens is a map of
// token → identity. Two tokens cannot be configured through app.Options.
func TestHTTPCrawlersAlternate(t *testing.T) {
	workers := []string{"crawler-a", "crawler-b"}
	assertFair(t, workers, contend(t, workers, httpAcquirer(workers)))
}

// TestHTTPGreedyCrawlerGetsNoMoreTurns: a crawler with two workers (two
// requests outstanding most of the time) against a crawler with one still
// alternates: fairness is between flows, not requests. With one worker each,
// first-come-first-served alternates as well; this case tells them apart.
//
// It fails today (holders BAABAABAAB…, the greedy flow gets two turns per
// turn of the other): with one exclusive proxy the releasing flow's next
// request always reaches the queue after the release was dispatched, and
// pkg/flowcontrol puts a flow that becomes active at the back of the
// round-robin, behind the flow just served, which still has a request
// waiting. So it runs only with E2E_FAIRNESS_KNOWN_DEFECTS=1 until that is
// fixed (then drop the gate).
func TestHTTPGreedyCrawlerGetsNoMoreTurns(t *testing.T) {
	if os.Getenv("E2E_FAIRNESS_KNOWN_DEFECTS") == "" {
		t.Skip("known defect of pkg/flowcontrol round-robin with one slot; set E2E_FAIRNESS_KNOWN_DEFECTS=1 to run")
	}
	workers := []string{"greedy", "greedy", "polite"}
	assertFair(t, workers, contend(t, workers, httpAcquirer(workers)))
}

// httpAcquirer acquires over the HTTP API in the crawler's flow, with one
// connection pool per crawler.
func httpAcquirer(workers []string) acquirer {
	clients := map[string]*http.Client{}
	for _, n := range workers {
		clients[n] = newHTTPClient()
	}
	return func(ctx context.Context, crawler string) (func(context.Context) error, error) {
		hc := clients[crawler]
		a, err := postLease(ctx, hc, leaseRequest(crawler, waitSeconds))
		if err != nil {
			return nil, err
		}
		l, err := granted(a)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return deleteLease(ctx, hc, l.LeaseID) }, nil
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
	a, err := postLease(ctx, holderClient, leaseRequest("latency", waitSeconds))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := granted(a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = deleteLease(ctx, holderClient, holder.LeaseID) }()

	var afterReturn, afterSend []time.Duration
	for i := range repeats {
		done := make(chan httpAnswer, 1)
		errs := make(chan error, 1)
		go func() {
			a, err := postLease(ctx, waiterClient, leaseRequest("latency", waitSeconds))
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
		if err := deleteLease(ctx, holderClient, holder.LeaseID); err != nil {
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
func TestFullQueueAnswers429(t *testing.T) {
	ctx := context.Background()
	hc := newHTTPClient()
	a, err := postLease(ctx, hc, leaseRequest("full-holder", 0))
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
			if err := deleteLease(ctx, hc, holder.LeaseID); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()

	// Waiters release as soon as they are granted, so one release drains them.
	results := make(chan error, queueMaxPerFlow+1)
	wait := func(flow string) {
		a, err := postLease(ctx, newHTTPClient(), leaseRequest(flow, 20))
		if err == nil {
			var l *wire.Lease
			if l, err = granted(a); err == nil {
				err = deleteLease(ctx, hc, l.LeaseID)
			}
		}
		results <- err
	}
	for range queueMaxPerFlow {
		go wait("full")
	}
	waitQueued(t, queueMaxPerFlow)

	rejectedBefore, httpRejectedBefore := metric(t, rejectedCapacity), metric(t, httpRejected)
	sent := time.Now()
	over, err := postLease(ctx, hc, leaseRequest("full", 20))
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
	go wait("full-other")
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
