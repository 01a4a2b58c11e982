package leasing

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// A closed gate refuses every lease method with ReasonNotLeader naming the
// leader, changes nothing, and counts the refused acquire; once open the
// same calls go through (negative control).
func TestGateRefusesUntilOpen(t *testing.T) {
	e := newServiceEnv(t, time.Minute)
	granted, err := e.svc.Acquire(context.Background(), request(time.Minute, 0))
	if err != nil {
		t.Fatal(err)
	}
	gate := NewGate(func(context.Context) string { return "operator-0_abc" })
	keyring, err := proxyauth.NewKeyring(make([]byte, proxyauth.MinKeySize), e.clk)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := NewService(APIHTTP, time.Minute, ServiceDeps{Store: e.store, Queue: e.queue, Clock: e.clk, Recorder: e.rec, Gate: gate, Auth: keyring})
	if err != nil {
		t.Fatal(err)
	}
	leased := proxyauth.ProxyRef{Namespace: granted.Proxy.Namespace, Name: granted.Proxy.Name}
	ctx := context.Background()
	calls := map[string]func() error{
		"Acquire": func() error { _, err := closed.Acquire(ctx, request(time.Minute, 0)); return err },
		"Release": func() error { _, err := closed.Release("http:a", granted.ID); return err },
		"Renew":   func() error { _, err := closed.Renew("http:a", granted.ID, time.Minute); return err },
		"Report":  func() error { return closed.Report("http:a", granted.ID, lease.ResultBanned, "site.example") },
		"Get":     func() error { _, err := closed.Get("http:a", granted.ID); return err },
		"CoolingFor": func() error {
			_, err := closed.CoolingFor("http:a", granted.ID, "site.example")
			return err
		},
		"Update":  func() error { _, err := closed.Update("http:a", granted.ID, time.Minute, nil); return err },
		"Reclaim": func() error { _, err := closed.Reclaim("http:a", "", granted.ID); return err },
		"ReportByName": func() error {
			return closed.ReportByName(lease.AnyHolder, granted.Namespace, granted.Name, lease.ResultBanned, "site.example")
		},
		"GetByName":  func() error { _, _, err := closed.GetByName(ctx, granted.Namespace, granted.Name); return err },
		"Reportable": func() error { _, err := closed.Reportable(ctx, granted.Namespace, granted.Name); return err },
		"List":       func() error { _, _, err := closed.List(ctx, ""); return err },
		"Revision":   func() error { _, err := closed.Revision(ctx); return err },
		"Counts":     func() error { _, err := closed.Counts(ctx); return err },
		"Proxies":    func() error { _, err := closed.Proxies(ctx, ""); return err },
		"LiveList": func() error {
			_, err := closed.LiveList(ctx, leased, proxyauth.ListToken(keyring.ProxyKey(leased), leased, e.clk.Now()))
			return err
		},
	}
	// Every method that answers a request is gated: a new one must be added
	// above, or to the methods that answer none.
	answersNone := map[string]bool{"Limits": true, "Invalid": true, "Watch": true, "FeedRevision": true,
		// Pure functions of a lease the caller already has.
		"Credentials": true, "ProxyURL": true}
	svcType := reflect.TypeOf(closed)
	for i := range svcType.NumMethod() {
		if m := svcType.Method(i).Name; calls[m] == nil && !answersNone[m] {
			t.Errorf("Service.%s is neither checked against the gate here nor known to answer no request", m)
		}
	}
	for name, call := range calls {
		err := call()
		var le *Error
		if !IsNotLeader(err) || !errors.As(err, &le) || le.Leader != "operator-0_abc" {
			t.Errorf("%s through a closed gate: %v, want NotLeader naming operator-0_abc", name, err)
		}
	}
	if _, ok := e.store.Get(granted.ID); !ok {
		t.Error("a refused Release ended the lease")
	}
	var st lease.State
	if e.store.StateInto(&st); len(st.Cooldowns) != 0 {
		t.Error("a refused Report started a cooldown")
	}
	if d := cmp.Diff([]string{"http/granted", "http/error"}, e.rec.got); d != "" {
		t.Errorf("outcomes (-want +got):\n%s", d)
	}
	gate.Open()
	for name, call := range calls {
		if name == "Acquire" || name == "Release" || name == "Reclaim" {
			continue
		}
		if err := call(); err != nil {
			t.Errorf("%s through the open gate: %v", name, err)
		}
	}
	if (*Gate)(nil).IsOpen() != true {
		t.Error("a nil gate must always serve")
	}
}

// Takeover prepares, then opens, then runs; a failed prepare never opens.
func TestTakeover(t *testing.T) {
	gate := NewGate(nil)
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s+" open="+map[bool]string{true: "yes", false: "no"}[gate.IsOpen()])
	}
	ctx, cancel := context.WithCancel(context.Background())
	tk := &Takeover{Gate: gate,
		Prepare: func(context.Context) error { note("prepare"); return nil },
		Stop:    func() { note("stop") },
		Run: func(runCtx context.Context) error {
			note("run")
			cancel()
			<-runCtx.Done()
			note("run's context ended")
			return nil
		}}
	if !tk.NeedLeaderElection() {
		t.Error("Takeover must be leader-elected")
	}
	// Wait on a replica that never led returns at once.
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer waitCancel()
	tk.Wait(waitCtx)
	if waitCtx.Err() != nil {
		t.Fatal("Wait blocked on a takeover that never started")
	}
	if err := tk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tk.Wait(waitCtx)
	if waitCtx.Err() != nil {
		t.Fatal("Wait blocked after Start returned")
	}
	// The gate closes and Stop runs before Run's own context ends: Run's
	// last checkpoint comes after the last change.
	if d := cmp.Diff([]string{"prepare open=no", "run open=yes", "stop open=no", "run's context ended open=no"}, order); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	failing := &Takeover{Gate: NewGate(nil), Prepare: func(context.Context) error { return errors.New("checkpoint unreachable") }}
	if err := failing.Start(context.Background()); err == nil || failing.Gate.IsOpen() {
		t.Errorf("failed prepare: %v, open %v", err, failing.Gate.IsOpen())
	}
}

// LeaseHolder reads the election Lease's holder at most once a second.
func TestLeaseHolder(t *testing.T) {
	kube := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "election", Namespace: "ops"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a_1")}})
	clk := clocktesting.NewFakeClock(epoch)
	holder := LeaseHolder(kube.CoordinationV1(), "ops", "election", clk)
	if got := holder(context.Background()); got != "pod-a_1" {
		t.Fatalf("holder %q", got)
	}
	l, _ := kube.CoordinationV1().Leases("ops").Get(context.Background(), "election", metav1.GetOptions{})
	l.Spec.HolderIdentity = ptr.To("pod-b_2")
	if _, err := kube.CoordinationV1().Leases("ops").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := holder(context.Background()); got != "pod-a_1" {
		t.Errorf("read again within the second: %q", got)
	}
	clk.Step(time.Second)
	if got := holder(context.Background()); got != "pod-b_2" {
		t.Errorf("after a second: %q, want pod-b_2", got)
	}
	if got := LeaseHolder(kube.CoordinationV1(), "ops", "missing", clk)(context.Background()); got != "" {
		t.Errorf("no Lease: %q", got)
	}
}

// proxy_operator_leases_serving follows the gate: 0 on a standby, 1 once it
// takes over, 0 again when it stops; without a gate (no leader election) 1.
func TestServingGauge(t *testing.T) {
	e := newServiceEnv(t, time.Minute)
	l := NewWithStore(e.store, DefaultOptions(), e.clk)
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l.Collectors()...)
	serving := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == ServingName {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("%s not gathered", ServingName)
		return -1
	}
	if got := serving(); got != 1 {
		t.Errorf("without a gate: %v, want 1", got)
	}
	l.Gate = NewGate(func(context.Context) string { return "" })
	for i, step := range []struct {
		do   func()
		want float64
	}{
		{func() {}, 0}, {l.Gate.Open, 1}, {l.Gate.Close, 0},
	} {
		step.do()
		if got := serving(); got != step.want {
			t.Errorf("step %d: %v, want %v", i, got, step.want)
		}
	}
}
