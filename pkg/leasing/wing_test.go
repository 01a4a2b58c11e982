package leasing_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/checkpoint"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// The wing serves nothing until its takeover opens the Gate (a standby's
// answer names the leader); then the same Service grants. Signed IDs and
// the checkpoint are built only when their options are enabled, and bad
// checkpoint options are refused at construction.
func TestNewWing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := leasing.WingConfig{Options: leasing.DefaultOptions(), IDs: leaseid.Options{}, Checkpoint: checkpoint.DefaultOptions(),
		Secrets: fake.NewClientset().CoreV1(), Leader: func(context.Context) string { return "operator-1" }, Clock: clk}
	w, err := leasing.NewWing(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	if w.IDs != nil {
		t.Error("lease IDs signed although --lease-signing-secret is unset")
	}
	w.Store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "p", URL: "http://127.0.0.1:3128", Healthy: true})
	svc, err := w.Service(leasing.APIHTTP, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := leasing.Request{Namespace: "ns", Identity: leasing.HTTPIdentity("a", "")}
	_, err = svc.Acquire(context.Background(), req)
	if !leasing.IsNotLeader(err) || leasing.AsError(err).Leader != "operator-1" {
		t.Fatalf("before the takeover: %v, want not_leader naming operator-1", err)
	}
	w.Gate.Open()
	if l, err := svc.Acquire(context.Background(), req); err != nil || l.Proxy.Name != "p" {
		t.Fatalf("after the takeover: %v, %v", l, err)
	}
	// No checkpoint: the hooks are no-ops.
	w.FinalAfter(make(chan struct{}))

	cfg.IDs = leaseid.Options{SecretName: "ids", Namespace: "ops"}
	cfg.Checkpoint = checkpoint.Options{SecretName: "cp", Namespace: "ops", Interval: time.Second}
	w2, err := leasing.NewWing(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Shutdown(context.Background()) })
	if w2.IDs == nil {
		t.Error("--lease-signing-secret set, yet lease IDs are not signed")
	}

	cfg.Checkpoint.Interval = -time.Second
	if _, err := leasing.NewWing(cfg); err == nil {
		t.Error("a negative checkpoint interval was accepted")
	}
}
