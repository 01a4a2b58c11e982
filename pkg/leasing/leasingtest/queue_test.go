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
	if res := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 1, deadline); res.Outcome != leasing.WaitGranted || res.Lease == nil {
		t.Fatalf("free proxy: %+v", res)
	}
	if res := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 0, deadline); res.Outcome != leasing.WaitNoMatch || res.Counts.AtCapacity != 1 {
		t.Fatalf("proxy taken: %+v", res)
	}
	if res := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns", TTL: 2 * time.Hour}, 0, deadline); res.Outcome != leasing.WaitRefused || !lease.IsTTLTooLong(res.Err) {
		t.Fatalf("TTL over the maximum: %+v", res)
	}
	q.Next(leasing.WaitResult{Outcome: leasing.WaitShuttingDown, Err: errors.New("injected")})
	if res := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 0, deadline); res.Outcome != leasing.WaitShuttingDown {
		t.Fatalf("injected answer: %+v", res)
	}
	if res := q.Wait(ctx, lease.AcquireRequest{Namespace: "ns"}, 0, deadline); res.Outcome != leasing.WaitNoMatch {
		t.Fatalf("after the injected answer: %+v", res)
	}
	if calls := q.Calls(); len(calls) != 5 || calls[0].Priority != 1 || !calls[0].Deadline.Equal(deadline) {
		t.Fatalf("calls %+v", calls)
	}
}
