package leasing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
