package restart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	dclient "github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
)

// tamper changes one character of a signed ID (in its MAC-covered middle).
func tamper(id string) string {
	i := len(id) / 2
	c := byte('a')
	if id[i] == 'a' {
		c = 'b'
	}
	return id[:i] + string(c) + id[i+1:]
}

// TestCrashLostLeasesComeBack: leases granted after the last checkpoint
// and lost to a SIGKILL come back, over both APIs, when their holder renews,
// or releases them; a report only records its
// cooldown; a second release stays a success; what cannot come back says
// why, and forged, tampered and expired IDs are refused.
func TestCrashLostLeasesComeBack(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	op := e.start(t)
	c := e.client(t)
	e.waitHealthy(t, c)
	kube, err := versioned.NewForConfig(e.cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	pls := kube.LeasingV1alpha1().ProxyLeases(crawlNS)

	// In the checkpoint: written at the graceful stop.
	var kept []string
	for i := range 5 {
		l, err := c.Acquire(ctx, wire.AcquireRequest{Target: fmt.Sprintf("kept-%d", i), TTLSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, l.LeaseID)
	}
	if err := op.Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Not in it: this run writes no checkpoint before it is killed.
	op = e.startOn(t, e.ports, []string{"--lease-checkpoint-interval=1h"}, true)
	c = e.client(t)
	e.waitHealthy(t, c)
	lost := make([]*wire.Lease, 6)
	for i := range lost {
		if lost[i], err = c.Acquire(ctx, wire.AcquireRequest{Target: fmt.Sprintf("lost-%d", i), TTLSeconds: 600}); err != nil {
			t.Fatal(err)
		}
	}
	short, err := c.Acquire(ctx, wire.AcquireRequest{Target: "short", TTLSeconds: 2})
	if err != nil {
		t.Fatal(err)
	}
	var lostPL []*leasingv1alpha1.ProxyLease
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for len(lostPL) < 3 {
			pl, err := pls.Create(ctx, &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "crawler-"},
				Spec: leasingv1alpha1.ProxyLeaseSpec{Target: fmt.Sprintf("pl-%d", len(lostPL))}}, metav1.CreateOptions{})
			if err != nil {
				lastErr = err // the APIService may not be available yet
				return false, nil
			}
			lostPL = append(lostPL, pl)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("creating ProxyLeases: %v (last: %v)", err, lastErr)
	}
	for _, pl := range lostPL {
		if !strings.HasSuffix(pl.Name, pl.Status.LeaseID) {
			t.Fatalf("ProxyLease %s does not carry its lease ID %s", pl.Name, pl.Status.LeaseID)
		}
	}
	op.Kill()
	// Capacity 1 from now on, so that a lost lease's proxy can fill up.
	e.startOn(t, e.ports, []string{"--max-leases-per-proxy=1"}, true)
	c = e.client(t)

	for _, id := range kept {
		if _, err := c.Get(ctx, id); err != nil {
			t.Errorf("checkpointed lease %s after SIGKILL: %v", id, err)
		}
	}
	// Control: the checkpoint does not have the lost ones, and a read does
	// not bring them back.
	for _, l := range lost {
		if _, err := c.Get(ctx, l.LeaseID); !dclient.IsUnknownLease(err) {
			t.Fatalf("lost lease %s before its holder came back: %v, want unknown_lease", l.LeaseID, err)
		}
	}

	// HTTP: renew and release take a lost lease back.
	if l, err := c.Renew(ctx, lost[0].LeaseID, 5*time.Minute); err != nil || l.Proxy.Name != lost[0].Proxy.Name {
		t.Errorf("renew of a lost lease = %+v, %v; want it back on %s", l, err, lost[0].Proxy.Name)
	}
	if err := c.Release(ctx, lost[2].LeaseID); err != nil {
		t.Errorf("release of a lost lease: %v", err)
	}
	if _, err := c.Get(ctx, lost[2].LeaseID); !dclient.IsLeaseEnded(err) {
		t.Errorf("the released lost lease: %v, want lease_ended", err)
	}
	// A second DELETE (a client retrying after a timeout) is still 204.
	if err := c.Release(ctx, lost[2].LeaseID); err != nil {
		t.Errorf("second release of a lost lease: %v, want 204", err)
	}
	// A report records the cooldown and takes nothing back (its holder may
	// have released it before the crash); the holder's renew does.
	if err := c.Report(ctx, lost[1].LeaseID, "banned", ""); err != nil {
		t.Errorf("report on a lost lease: %v", err)
	}
	if _, err := c.Get(ctx, lost[1].LeaseID); !dclient.IsUnknownLease(err) {
		t.Errorf("the reported lost lease: %v, want unknown_lease (not taken back)", err)
	}
	if l, err := c.Renew(ctx, lost[1].LeaseID, 5*time.Minute); err != nil || l.Proxy.Name != lost[1].Proxy.Name {
		t.Errorf("renew of the reported lost lease = %+v, %v; want it back on %s", l, err, lost[1].Proxy.Name)
	}
	// Its proxy taken meanwhile: 409 no_room, and the new lease keeps it.
	e.waitHealthy(t, c)
	taker, err := c.Acquire(ctx, wire.AcquireRequest{Selector: map[string]string{"id": lost[3].Proxy.Name}, TTLSeconds: 60})
	if err != nil {
		t.Fatalf("leasing the lost lease's proxy: %v", err)
	}
	if _, err := c.Renew(ctx, lost[3].LeaseID, time.Minute); !dclient.IsNoRoom(err) {
		t.Errorf("renew of a lost lease whose proxy is full: %v, want no_room", err)
	}
	if _, err := c.Get(ctx, taker.LeaseID); err != nil {
		t.Errorf("the lease that took the room: %v", err)
	}
	// Expired meanwhile: 410.
	time.Sleep(time.Until(short.ExpiresAt.Add(100 * time.Millisecond)))
	if _, err := c.Renew(ctx, short.LeaseID, time.Minute); !dclient.IsLeaseEnded(err) {
		t.Errorf("renew of an expired lost lease: %v, want lease_ended", err)
	}
	// Forged and tampered: 404, nothing comes back; the untouched ID does.
	for name, id := range map[string]string{"forged": "0123456789abcdef0123456789abcdef", "tampered": tamper(lost[4].LeaseID)} {
		if _, err := c.Renew(ctx, id, time.Minute); !dclient.IsUnknownLease(err) {
			t.Errorf("%s ID: %v, want unknown_lease", name, err)
		}
	}
	if _, err := c.Renew(ctx, lost[4].LeaseID, time.Minute); err != nil {
		t.Errorf("control: the untampered ID: %v", err)
	}

	// Kubernetes API: a renewing patch, a report and a delete of a lost
	// ProxyLease, by name (generateName + its signed ID).
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := pls.Get(ctx, lostPL[0].Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil // the control: served, and not there yet
		}
		lastErr = err
		return false, nil
	}); err != nil {
		t.Fatalf("the aggregated API after the crash: %v (last: %v)", err, lastErr)
	}
	renewed, err := pls.Patch(ctx, lostPL[0].Name, types.MergePatchType, []byte(`{"spec":{"ttlSeconds":900}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("renewing a lost ProxyLease: %v", err)
	}
	if renewed.Status.Proxy == nil || renewed.Status.Proxy.Name != lostPL[0].Status.Proxy.Name || *renewed.Spec.TTLSeconds != 900 {
		t.Errorf("renewed lost ProxyLease: %+v", renewed.Status)
	}
	if _, err := pls.Report(ctx, lostPL[1].Name, &leasingv1alpha1.ProxyLeaseReport{Result: leasingv1alpha1.ResultRateLimited}, metav1.CreateOptions{}); err != nil {
		t.Errorf("report on a lost ProxyLease: %v", err)
	}
	// The report took nothing back; a renewing patch does.
	if _, err := pls.Get(ctx, lostPL[1].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the reported lost ProxyLease: %v, want NotFound (not taken back)", err)
	}
	if got, err := pls.Patch(ctx, lostPL[1].Name, types.MergePatchType, []byte(`{"spec":{"ttlSeconds":900}}`), metav1.PatchOptions{}); err != nil ||
		got.Status.Proxy == nil || got.Status.Proxy.Name != lostPL[1].Status.Proxy.Name {
		t.Errorf("renewing the reported lost ProxyLease: %+v, %v", got, err)
	}
	// The HTTP lease taken back by its renew shows as a ProxyLease.
	if got, err := pls.Get(ctx, lost[1].LeaseID, metav1.GetOptions{}); err != nil || got.Status.Proxy == nil || got.Status.Proxy.Name != lost[1].Proxy.Name {
		t.Errorf("the renewed lost HTTP lease as a ProxyLease: %+v, %v", got, err)
	}
	if err := pls.Delete(ctx, lostPL[2].Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete of a lost ProxyLease: %v", err)
	}
	if _, err := pls.Get(ctx, lostPL[2].Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted lost ProxyLease: %v", err)
	}
	// Deleted twice: NotFound, as for any object (not 410).
	if err := pls.Delete(ctx, lostPL[2].Name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("second delete of a lost ProxyLease: %v, want NotFound", err)
	}
	if err := pls.Delete(ctx, "crawler-"+tamper(lostPL[0].Status.LeaseID), metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete of a tampered ProxyLease name: %v, want NotFound", err)
	}
}
