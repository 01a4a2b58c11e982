package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/health/healthtest"
)

// TestHealthFollowsSquid: External proxies pointing at a real squid go Ready
// over a plain HTTP probe and an HTTPS probe through a CONNECT tunnel; killing
// squid turns both Unhealthy within failureThreshold × interval + 2s;
// restarting it brings both back to Ready. Events mark both transitions.
func TestHealthFollowsSquid(t *testing.T) {
	e := newEnv(t)
	o := startOrigins(t)
	sq := startSquid(t)
	e.startOperator()

	e.create(e.external("plain", sq, o.plain.URL+"/", nil))
	e.create(e.external("tls", sq, o.tls.URL+"/", o.caBundle()))
	for _, name := range []string{"plain", "tls"} {
		p, _ := e.waitProxy(name, "Ready", waitTimeout, isReady)
		c := healthCondition(p)
		if c.Reason != crawlv1alpha1.ReasonProbeSucceeded || p.Status.LatencyMillis == nil ||
			p.Status.LastHealthCheckTime == nil || p.Status.IP != sq.addr.String() {
			t.Errorf("%s Ready but status incomplete: %s", name, describe(p))
		}
		if !strings.Contains(c.Message, sq.url()) {
			t.Errorf("%s message %q does not name the proxy %s", name, c.Message, sq.url())
		}
	}
	// The probes went through squid: a forwarded GET and a CONNECT tunnel.
	tlsHost := o.tls.Listener.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for sq.countAccess("GET "+o.plain.URL+"/") == 0 || sq.countAccess("CONNECT "+tlsHost) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("squid access log lacks the GET %s/ or CONNECT %s probes:\n%s",
				o.plain.URL, tlsHost, strings.Join(sq.accessLog(), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	sq.kill()
	killedAt := time.Now()
	for _, name := range []string{"plain", "tls"} {
		p, _ := e.waitProxy(name, "Unhealthy", unhealthyBound+10*time.Second, isUnhealthy)
		// Polled in turn, so this is an upper bound of each detection time.
		if took := time.Since(killedAt); took > unhealthyBound {
			t.Errorf("%s turned Unhealthy %s after squid died, bound %s", name, took.Round(time.Millisecond), unhealthyBound)
		} else {
			t.Logf("%s Unhealthy within %s of the kill (bound %s)", name, took.Round(time.Millisecond), unhealthyBound)
		}
		if c := healthCondition(p); c.Reason != crawlv1alpha1.ReasonProbeFailed || !strings.Contains(c.Message, "connecting to the proxy: connection refused") {
			t.Errorf("%s unhealthy condition %s/%q, want ProbeFailed naming the proxy connection", name, c.Reason, c.Message)
		}
		if p.Status.LatencyMillis != nil {
			t.Errorf("%s unhealthy with latency %d", name, *p.Status.LatencyMillis)
		}
		e.waitEvent(name, corev1.EventTypeWarning, controller.EventReasonUnhealthy)
	}

	sq.start()
	for _, name := range []string{"plain", "tls"} {
		e.waitProxy(name, "Ready again", waitTimeout, isReady)
		e.waitEvent(name, corev1.EventTypeNormal, controller.EventReasonRecovered)
	}
}

// TestUnexpectedStatusIsUnhealthy: a target answering another status than
// expectedStatus makes the Proxy Unhealthy, over HTTP and HTTPS alike, while
// a proxy probing a healthy path through the same squid is Ready (control).
func TestUnexpectedStatusIsUnhealthy(t *testing.T) {
	e := newEnv(t)
	o := startOrigins(t)
	sq := startSquid(t)
	e.startOperator()

	e.create(e.external("control", sq, o.plain.URL+"/", nil))
	e.create(e.external("broken", sq, o.plain.URL+"/broken", nil))
	e.create(e.external("broken-tls", sq, o.tls.URL+"/broken", o.caBundle()))
	e.waitProxy("control", "Ready", waitTimeout, isReady)
	for _, name := range []string{"broken", "broken-tls"} {
		p, _ := e.waitProxy(name, "Unhealthy", waitTimeout, isUnhealthy)
		want := fmt.Sprintf("got HTTP %d, want %d", http.StatusServiceUnavailable, http.StatusOK)
		if c := healthCondition(p); !strings.Contains(c.Message, want) {
			t.Errorf("%s message %q lacks %q", name, c.Message, want)
		}
	}
}

// TestRestartWithHealthyFleetDoesNotFlap: restarting the operator (manager,
// reconciler and a fresh engine) with a healthy fleet writes no Healthy
// condition at all — in particular no transition away from True — while the
// new engine keeps probing. Negative control: the same watch then sees every
// proxy turn Unhealthy when squid dies.
func TestRestartWithHealthyFleetDoesNotFlap(t *testing.T) {
	e := newEnv(t)
	o := startOrigins(t)
	sq := startSquid(t)
	e.startOperator()

	var names []string
	for i := range 4 {
		name := fmt.Sprintf("fleet-%d", i)
		if i%2 == 0 {
			e.create(e.external(name, sq, o.plain.URL+"/", nil))
		} else {
			e.create(e.external(name, sq, o.tls.URL+"/", o.caBundle()))
		}
		names = append(names, name)
	}
	for _, name := range names {
		e.waitProxy(name, "Ready", waitTimeout, isReady)
	}
	e.stopOperator()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := e.watchConditions(ctx)
	probedBefore := len(sq.accessLog())
	e.startOperator()

	// Three intervals after the new engine's first probes (the seeded first
	// probes are jittered across one interval).
	// The probes are counted where they arrive: Squid's access log.
	deadline := time.Now().Add(waitTimeout)
	for len(sq.accessLog())-probedBefore < 2*len(names) {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted engine probed %d times", len(sq.accessLog())-probedBefore)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * probeInterval * time.Second)

	writes, condWrites, away := w.counts()
	t.Logf("after the restart: %d status writes, %d Healthy condition writes, %d away from True; %d squid requests",
		writes, condWrites, away, len(sq.accessLog())-probedBefore)
	if condWrites != 0 || away != 0 {
		t.Errorf("restart wrote the Healthy condition %d times (%d away from True):\n%s", condWrites, away, w.log())
	}
	// Stronger: no status write at all. The seeded engine re-reports
	// nothing (no first verdict, latency within max(20ms, 50%) or inside the
	// 60s rate limit that continues from lastHealthCheckTime); an engine
	// starting from scratch would rewrite every proxy's latency and time.
	if writes != 0 {
		t.Errorf("restart caused %d status writes", writes)
	}
	if got := len(sq.accessLog()) - probedBefore; got < 2*len(names) {
		t.Errorf("only %d probes reached squid after the restart: the invariant would hold vacuously", got)
	}
	for _, name := range names {
		if p := e.get(name); !isReady(p) {
			t.Errorf("%s after the restart: %s", name, describe(p))
		}
	}

	// Negative control: the watch does count condition writes.
	sq.kill()
	for _, name := range names {
		e.waitProxy(name, "Unhealthy", waitTimeout, isUnhealthy)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, condWrites, away := w.counts()
		if condWrites >= len(names) && away >= len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch saw %d condition writes (%d away from True) after squid died, want %d", condWrites, away, len(names))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// conditionWatch counts status writes of the namespace's Proxies from a
// watch: all modifications, those that changed the Healthy condition, and
// those leaving it anything but True.
type conditionWatch struct {
	mu         sync.Mutex
	last       map[string]*metav1.Condition
	writes     int
	condWrites int
	away       int
	lines      []string
}

// watchConditions lists the Proxies and watches them from that list's
// resourceVersion until ctx ends.
func (e *env) watchConditions(ctx context.Context) *conditionWatch {
	e.t.Helper()
	var list crawlv1alpha1.ProxyList
	if err := e.c.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	cw := &conditionWatch{last: map[string]*metav1.Condition{}}
	for i := range list.Items {
		cw.last[list.Items[i].Name] = healthCondition(&list.Items[i])
	}
	wi, err := e.c.Watch(ctx, &crawlv1alpha1.ProxyList{}, client.InNamespace(e.ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer wi.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					return
				}
				p, isProxy := ev.Object.(*crawlv1alpha1.Proxy)
				if ev.Type != watch.Modified || !isProxy {
					continue
				}
				cw.observe(p)
			}
		}
	}()
	return cw
}

func (cw *conditionWatch) observe(p *crawlv1alpha1.Proxy) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.writes++
	c := healthCondition(p)
	if sameCondition(cw.last[p.Name], c) {
		return
	}
	cw.condWrites++
	if c == nil || c.Status != metav1.ConditionTrue {
		cw.away++
	}
	cw.last[p.Name] = c
	cw.lines = append(cw.lines, p.Name+": "+describe(p))
}

func (cw *conditionWatch) counts() (writes, condWrites, away int) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.writes, cw.condWrites, cw.away
}

func (cw *conditionWatch) log() string {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return strings.Join(cw.lines, "\n")
}

func sameCondition(a, b *metav1.Condition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// A Proxy pointed at something that is not a proxy (here a listener that
// sends an SSH banner, as an internal service would) turns Unhealthy with a
// condition and a Warning Event in the operator's words: neither quotes what
// the listener sent.
func TestProbeFailuresQuoteNothingRemote(t *testing.T) {
	e := newEnv(t)
	o := startOrigins(t)
	const banner = "SSH-2.0-OpenSSH_9.6 secret-internal-banner\r\n"
	peer, err := healthtest.NewReplyPeer(banner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	port := netip.MustParseAddrPort(peer.Addr).Port()
	e.startOperator()
	p := e.external("banner", startSquid(t), o.plain.URL+"/", nil)
	p.Spec.Endpoint = &crawlv1alpha1.Endpoint{Host: "127.0.0.1", Port: int32(port)}
	e.create(p)
	got, _ := e.waitProxy("banner", "Unhealthy", waitTimeout, isUnhealthy)
	e.waitEvent("banner", corev1.EventTypeWarning, controller.EventReasonUnhealthy)
	var list corev1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	messages := []string{healthCondition(got).Message}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == "banner" {
			messages = append(messages, ev.Message)
		}
	}
	for _, m := range messages {
		if strings.Contains(m, "SSH-2.0") || strings.Contains(m, "secret-internal-banner") {
			t.Errorf("a status or Event message quotes the listener: %q", m)
		}
	}
	if c := healthCondition(got); !strings.Contains(c.Message, "no valid HTTP answer") {
		t.Errorf("condition message %q does not say what failed", c.Message)
	}
}
