package leasing_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/leasing/leasingtest"
)

// A hostile token that leases every proxy in turn, reports it banned and
// releases it, for five minutes, must not take more than a tenth of the
// fleet from another identity's lease for a site the hostile token never
// named (#26 item 2). On the code before, a report without a target cooled
// the proxy for every site: the victim found no proxy at all.
func TestOneHolderCannotCoolTheFleetForOthers(t *testing.T) {
	const fleet = 20
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := lease.New(lease.Options{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fleet {
		store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: fmt.Sprintf("p%02d", i), URL: "http://127.0.0.2:3128",
			Host: "127.0.0.2", Port: 3128, Healthy: true})
	}
	svc, err := leasing.NewService(leasing.APIHTTP, 0, leasing.ServiceDeps{Store: store, Queue: &leasingtest.Queue{Store: store}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	hostile := leasing.HTTPIdentity("hostile", "")
	victim := leasing.HTTPIdentity("victim", "")
	ctx := context.Background()
	// freeForVictim counts the proxies the victim can lease for its site.
	freeForVictim := func() int {
		var held []string
		for {
			l, err := svc.Acquire(ctx, leasing.Request{Namespace: "ns", Target: "victim.example", Identity: victim})
			if err != nil {
				break
			}
			held = append(held, l.ID)
		}
		for _, id := range held {
			if _, err := svc.Release(victim.Holder, id); err != nil {
				t.Fatal(err)
			}
		}
		return len(held)
	}
	refused, accepted := 0, 0
	worst := fleet
	for round := 0; clk.Since(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) < 5*time.Minute; round++ {
		var ids []string
		for {
			// Leases without a target, and with the hostile token's own.
			target := ""
			if round%2 == 1 {
				target = fmt.Sprintf("hostile-%d.example", round)
			}
			l, err := svc.Acquire(ctx, leasing.Request{Namespace: "ns", Target: target, Identity: hostile})
			if err != nil {
				break
			}
			ids = append(ids, l.ID)
		}
		for _, id := range ids {
			for _, target := range []string{"", fmt.Sprintf("own-%d.example", round)} {
				for _, result := range []string{lease.ResultBanned, lease.ResultRateLimited} {
					if err := svc.Report(hostile.Holder, id, result, target); err != nil {
						refused++
					} else {
						accepted++
					}
				}
			}
			if _, err := svc.Release(hostile.Holder, id); err != nil {
				t.Fatal(err)
			}
			// A report after the release, within the cooldown window.
			if err := svc.Report(hostile.Holder, id, lease.ResultBanned, ""); err == nil {
				accepted++
			} else {
				refused++
			}
		}
		worst = min(worst, freeForVictim())
		clk.Step(time.Second)
	}
	if worst < fleet*9/10 {
		t.Errorf("the victim could lease only %d of %d proxies for its own site at the worst moment, want at least 90%%", worst, fleet)
	}
	// The check above must have had something to catch: the hostile
	// token's reports on its own sites were accepted, those without one
	// refused.
	if accepted == 0 || refused == 0 {
		t.Errorf("hostile reports: %d accepted, %d refused; the loop did not exercise both", accepted, refused)
	}
}

// One identity cannot fill the wait queue nor take B's turn (#26 item 3):
// 400 waiting requests over 4 priority bands and 50 flows from identity A,
// which holds every proxy, with --lease-queue-max=200. A may queue a quarter
// of it (the default --lease-queue-max-per-identity) and is refused the
// rest; B's waiting request is queued, not refused, and granted when a proxy
// frees. On the code before, A's flows and bands filled all 200 places and
// B was refused 429.
func TestOneIdentityCannotFillTheQueue(t *testing.T) {
	store, err := lease.New(lease.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: fmt.Sprintf("p%d", i), URL: "http://127.0.0.2:3128",
			Host: "127.0.0.2", Port: 3128, Healthy: true})
	}
	opts := leasing.DefaultOptions()
	opts.QueueMax = 200
	l := leasing.NewWithStore(store, opts, clock.RealClock{})
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	svc, err := l.Service(leasing.APIHTTP, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := leasing.HTTPIdentity("a", ""), leasing.HTTPIdentity("b", "")
	var held []string
	for range 2 {
		g, err := svc.Acquire(context.Background(), leasing.Request{Namespace: "ns", Identity: a})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, g.ID)
	}

	ctx, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	var wg sync.WaitGroup
	var full, other atomic.Int64
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := svc.Acquire(ctx, leasing.Request{Namespace: "ns", Identity: leasing.HTTPIdentity("a", fmt.Sprintf("f%d", i%50)),
				Priority: -(i % 4), Wait: time.Minute})
			switch {
			case leasing.IsQueueFull(err):
				full.Add(1)
			case !leasing.IsCancelled(err):
				other.Add(1)
			}
		}()
	}
	waitingOf := func(id leasing.Identity) int {
		return l.Waiting(func(r lease.AcquireRequest) bool { return r.Holder == id.Holder })
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return full.Load()+int64(waitingOf(a)) == 400, nil
	}); err != nil {
		t.Fatalf("A's requests never settled: %d refused, %d waiting", full.Load(), waitingOf(a))
	}
	if got := waitingOf(a); got != 50 {
		t.Errorf("A has %d requests waiting, want 50 (a quarter of --lease-queue-max)", got)
	}

	granted := make(chan error, 1)
	go func() {
		_, err := svc.Acquire(context.Background(), leasing.Request{Namespace: "ns", Identity: b, Wait: time.Minute})
		granted <- err
	}()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-granted:
			return false, fmt.Errorf("B's request was answered while every proxy is held: %v", err)
		default:
		}
		return waitingOf(b) == 1, nil
	}); err != nil {
		t.Fatalf("B's waiting request was not queued: %v", err)
	}
	// A proxy frees while A's 50 requests still wait: it goes to B, who
	// holds nothing, not to A's flows that waited longer (fair shares are
	// per identity first). On the code before, fairness was per flow: each
	// of A's 50 flows held nothing either and had joined first.
	if _, err := svc.Release(a.Holder, held[0]); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Errorf("B's request when a proxy freed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("B's request was not granted when a proxy freed (A has %d waiting)", waitingOf(a))
	}
	cancelA()
	wg.Wait()
	if other.Load() != 0 {
		t.Errorf("%d of A's requests ended otherwise than refused or cancelled (one may take a freed proxy before B)", other.Load())
	}
}

// Priority is the server's decision: without a grant no identity may ask
// above the default, a grant to its token, user or group lets it, and
// nobody may ask below MinPriority.
func TestPriorityIsGranted(t *testing.T) {
	grants := leasing.PriorityGrants{}
	if err := grants.Set("token:crawler-a=10, user:alice=3,group:ops=5"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"crawler-a=10", "token:crawler-a", "token:=3", "token:x=0", "token:x=101", "host:x=3"} {
		if err := (leasing.PriorityGrants{}).Set(bad); err == nil {
			t.Errorf("grant %q accepted", bad)
		}
	}
	alice := leasing.KubernetesIdentity("alice")
	opsBob := leasing.KubernetesIdentity("bob")
	opsBob.Groups = []string{"system:authenticated", "ops"}
	for _, tc := range []struct {
		who  string
		id   leasing.Identity
		want int
	}{
		{"a granted token", leasing.HTTPIdentity("crawler-a", "batch"), 10},
		{"another token", leasing.HTTPIdentity("crawler-b", ""), 0},
		{"a granted user", alice, 3},
		{"a member of a granted group", opsBob, 5},
		{"a user named like the granted token", leasing.KubernetesIdentity("http:crawler-a"), 0},
		{"a token named like the granted user", leasing.HTTPIdentity("alice", ""), 0},
	} {
		if got := grants.Max(tc.id); got != tc.want {
			t.Errorf("%s: may ask up to %d, want %d", tc.who, got, tc.want)
		}
	}

	store, err := lease.New(lease.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "p", URL: "http://127.0.0.2:3128", Host: "127.0.0.2", Port: 3128, Healthy: true})
	svc, err := leasing.NewService(leasing.APIHTTP, 0, leasing.ServiceDeps{Store: store, Queue: &leasingtest.Queue{Store: store}, Priorities: grants})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id       leasing.Identity
		priority int
		ok       bool
	}{
		{leasing.HTTPIdentity("crawler-b", ""), 1, false},
		{leasing.HTTPIdentity("crawler-b", ""), leasing.MinPriority - 1, false},
		{leasing.HTTPIdentity("crawler-b", ""), leasing.MinPriority, true},
		{leasing.HTTPIdentity("crawler-a", ""), 10, true},
		{leasing.HTTPIdentity("crawler-a", ""), 11, false},
	} {
		g, err := svc.Acquire(context.Background(), leasing.Request{Namespace: "ns", Identity: tc.id, Priority: tc.priority})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s at priority %d: %v", tc.id.Holder, tc.priority, err)
		case !tc.ok && (!leasing.IsInvalid(err) || !strings.Contains(err.Error(), "priority")):
			t.Errorf("%s at priority %d: %v, want invalid naming priority", tc.id.Holder, tc.priority, err)
		}
		if g != nil {
			if _, err := svc.Release(tc.id.Holder, g.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}
