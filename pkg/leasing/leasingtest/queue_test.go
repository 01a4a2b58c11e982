package leasingtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// The fake answers from its store, records calls and obeys Next once.
func TestQueueAnswersFromTheStoreAndObeysNext(t *testing.T) {
	store, err := lease.New(lease.Options{MaxTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "p", Healthy: true})
	q := &Queue{Store: store}
	ctx, deadline := context.Background(), time.Now().Add(time.Minute)
	if l, err := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 1, deadline); err != nil || l == nil {
		t.Fatalf("free proxy: %v, %v", l, err)
	}
	if _, err := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 0, deadline); !leasing.IsNoMatch(err) || leasing.AsError(err).Counts.AtCapacity != 1 {
		t.Fatalf("proxy taken: %v", err)
	}
	if _, err := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns", TTL: 2 * time.Hour}, 0, deadline); !leasing.IsInvalid(err) || !lease.IsTTLTooLong(err) {
		t.Fatalf("TTL over the maximum: %v", err)
	}
	q.Next(&leasing.Error{Reason: leasing.ReasonShuttingDown, Cause: errors.New("injected")})
	if _, err := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 0, deadline); !leasing.IsShuttingDown(err) {
		t.Fatalf("injected answer: %v", err)
	}
	if _, err := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 0, deadline); !leasing.IsNoMatch(err) {
		t.Fatalf("after the injected answer: %v", err)
	}
	if calls := q.Calls(); len(calls) != 5 || calls[0].Priority != 1 || !calls[0].Deadline.Equal(deadline) {
		t.Fatalf("calls %+v", calls)
	}
}
