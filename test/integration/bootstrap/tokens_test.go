package bootstrap

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// TestTokenSecret: a missing token Secret is created with one generated
// token; a second replica loads the same token; a crawler added to the Secret
// is accepted after the next read; a malformed edit or an emptied Secret
// keeps the tokens in use.
func TestTokenSecret(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ns := e.namespace(t, "tokens")
	clk := clocktesting.NewFakeClock(time.Now())
	o := discovery.DefaultServingOptions()
	o.TokenSecret = "discovery-tokens"
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	tokens, ts, err := o.LoadTokens(ctx, func(string) string { return "" }, e.kube.CoreV1(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if ts == nil || len(tokens) != 1 {
		t.Fatalf("created Secret gave %d tokens (follower %v), want 1", len(tokens), ts != nil)
	}
	var token string
	for tk, id := range tokens {
		if id.Identity != discovery.DefaultIdentity || len(tk) != 64 {
			t.Errorf("generated token of identity %q, %d characters", id, len(tk))
		}
		token = tk
	}
	again, _, err := o.LoadTokens(ctx, func(string) string { return "" }, e.kube.CoreV1(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if again[token].Identity != discovery.DefaultIdentity || len(again) != 1 {
		t.Error("a second replica did not load the same token")
	}

	store, err := lease.New(lease.Options{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	l := leasing.NewWithStore(store, leasing.DefaultOptions(), clk)
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	svc, err := l.Service(leasing.APIHTTP, o.MaxWait, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := discovery.New(discovery.Options{Tokens: tokens, Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	status := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/proxies", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const added = "0123456789abcdef0123456789abcdef"
	if status(token) != 200 || status(added) != 401 {
		t.Fatal("before the edit: want the generated token accepted and the new one refused")
	}

	ts.Clock = clk
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ts.Follow(srv).Start(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("follower: %v", err)
		}
	}()
	edit := func(data string) {
		t.Helper()
		s, err := e.kube.CoreV1().Secrets(ns).Get(ctx, o.TokenSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data[discovery.TokenSecretKey] = []byte(data)
		if _, err := e.kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// tick steps the follower's ticker once it is waiting on it.
	tick := func() {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return clk.HasWaiters(), nil
		}); err != nil {
			t.Fatal("the follower never waited on its ticker")
		}
		clk.Step(discovery.DefaultTokenSecretInterval)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for range 50 {
			tick()
			if cond() {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: not within 50 reads", what)
	}

	edit(token + "," + discovery.DefaultIdentity + "\n" + added + ",crawler-b\n")
	eventually("the added crawler accepted", func() bool { return status(added) == 200 })
	if status(token) != 200 {
		t.Error("the first token was dropped by the edit that kept it")
	}

	for _, bad := range []string{"no-identity-here token with spaces\n", "", strings.Repeat("#\n", 3)} {
		edit(bad)
		for range 3 {
			tick()
			time.Sleep(20 * time.Millisecond)
		}
		if status(added) != 200 || status(token) != 200 {
			t.Errorf("after the edit %q the tokens in use were not kept", bad)
		}
	}
}
