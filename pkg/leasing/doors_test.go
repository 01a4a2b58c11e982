package leasing_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/leasing/leasingtest"
	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"
	"github.com/proxy-operator/proxy-operator/pkg/sites"
)

// doorAnswer is what one door answered an acquire: the HTTP status and the
// API's own code (the JSON error code, or the Kubernetes Status reason).
type doorAnswer struct {
	Status int
	Code   string
	// RetryAfter is the Retry-After header's seconds (0: none).
	RetryAfter int
}

// The two front doors map every outcome of the lease path to their status
// codes in one function each (discovery's writeServiceError, the registry's
// statusFor); one table runs both over the same outcomes, so that neither
// answers a case the other maps differently without this table saying so.
func TestBothDoorsMapEveryOutcome(t *testing.T) {
	tests := []struct {
		name       string
		res        error
		closedGate bool
		http, kube doorAnswer
	}{
		{name: "granted", res: nil,
			http: doorAnswer{201, "", 0}, kube: doorAnswer{201, "", 0}},
		{name: "no proxy before the deadline", res: &leasing.Error{Reason: leasing.ReasonNoMatch, Counts: leasing.NoMatchCounts{Considered: 1, AtCapacity: 1}},
			http: doorAnswer{409, wire.CodeNoMatch, 0}, kube: doorAnswer{409, string(metav1.StatusReasonConflict), 0}},
		{name: "a site's budget in use", res: &leasing.Error{Reason: leasing.ReasonNoMatch, Counts: leasing.NoMatchCounts{Considered: 2, Free: 2, Site: &sites.Refusal{Policy: "shop", Limit: 2, Live: 2}}},
			http: doorAnswer{409, wire.CodeNoMatch, 0}, kube: doorAnswer{409, string(metav1.StatusReasonConflict), 0}},
		{name: "a queue limit", res: &leasing.Error{Reason: leasing.ReasonQueueFull, RetryAfter: 2 * time.Second, Cause: errors.New("band full")},
			http: doorAnswer{429, wire.CodeQueueFull, 2}, kube: doorAnswer{429, string(metav1.StatusReasonTooManyRequests), 2}},
		{name: "the caller left", res: &leasing.Error{Reason: leasing.ReasonCancelled, Cause: context.Canceled},
			http: doorAnswer{503, wire.CodeUnavailable, 0}, kube: doorAnswer{504, string(metav1.StatusReasonTimeout), 0}},
		{name: "the queue shuts down", res: &leasing.Error{Reason: leasing.ReasonShuttingDown, Cause: leasing.ErrShuttingDown},
			http: doorAnswer{503, wire.CodeUnavailable, 1}, kube: doorAnswer{503, string(metav1.StatusReasonServiceUnavailable), 1}},
		{name: "the store: name taken", res: leasing.FromStore(&lease.AlreadyExistsError{Namespace: "ns", Name: "x"}),
			http: doorAnswer{409, wire.CodeInvalidRequest, 0}, kube: doorAnswer{409, string(metav1.StatusReasonAlreadyExists), 0}},
		{name: "the store: TTL over the maximum", res: leasing.FromStore(&lease.TTLError{Requested: 2 * time.Hour, Max: time.Hour}),
			http: doorAnswer{400, wire.CodeTTLTooLong, 0}, kube: doorAnswer{422, string(metav1.StatusReasonInvalid), 0}},
		{name: "the store: a cooling report without a target", res: leasing.FromStore(lease.ErrNoTarget),
			http: doorAnswer{400, wire.CodeInvalidRequest, 0}, kube: doorAnswer{422, string(metav1.StatusReasonInvalid), 0}},
		{name: "the store: a holder's cooldowns at their limit", res: leasing.FromStore(&lease.CooldownLimitError{Holder: "h", Max: 1}),
			http: doorAnswer{403, wire.CodeCooldownLimit, 0}, kube: doorAnswer{403, string(metav1.StatusReasonForbidden), 0}},
		{name: "the store: stopped serving", res: leasing.FromStore(lease.ErrFrozen),
			http: doorAnswer{503, wire.CodeUnavailable, 1}, kube: doorAnswer{503, string(metav1.StatusReasonServiceUnavailable), 1}},
		{name: "a bug", res: leasing.FromStore(errors.New("boom")),
			http: doorAnswer{500, wire.CodeInternal, 0}, kube: doorAnswer{500, string(metav1.StatusReasonInternalError), 0}},
		{name: "a standby (or a handover's successor)", closedGate: true,
			http: doorAnswer{503, wire.CodeNotLeader, 1}, kube: doorAnswer{503, string(metav1.StatusReasonServiceUnavailable), 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newDoors(t, tc.closedGate)
			if tc.res != nil {
				e.queue.Next(tc.res)
			}
			if got := e.httpAcquire(t); got != tc.http {
				t.Errorf("HTTP answered %+v, want %+v", got, tc.http)
			}
			if tc.res != nil {
				e.queue.Next(tc.res)
			}
			if got := e.kubeAcquire(t); got != tc.kube {
				t.Errorf("Kubernetes answered %+v, want %+v", got, tc.kube)
			}
		})
	}
}

type doors struct {
	queue *leasingtest.Queue
	http  *httptest.Server
	rest  *proxylease.REST
}

// newDoors serves both doors over one store with a free proxy, through one
// fake queue.
func newDoors(t *testing.T, closedGate bool) *doors {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	store, err := lease.New(lease.Options{MaxTTL: time.Hour, MaxLeasesPerProxy: 10}, clk)
	if err != nil {
		t.Fatal(err)
	}
	store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "px", URL: "http://127.0.0.9:3128", Host: "127.0.0.9", Port: 3128, Healthy: true})
	q := &leasingtest.Queue{Store: store}
	var gate *leasing.Gate
	if closedGate {
		gate = leasing.NewGate(func(context.Context) string { return "leader-0" })
	}
	service := func(api string) *leasing.Service {
		svc, err := leasing.NewService(api, time.Minute, leasing.ServiceDeps{Store: store, Queue: q, Clock: clk, Gate: gate})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	srv, err := discovery.New(discovery.Options{Tokens: discovery.SingleToken("tok"), Service: service(leasing.APIHTTP)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	r, closeREST := proxylease.NewREST(service(leasing.APIKubernetes), clk, 16)
	t.Cleanup(closeREST)
	return &doors{queue: q, http: ts, rest: r}
}

func (d *doors) httpAcquire(t *testing.T) doorAnswer {
	req, err := http.NewRequest(http.MethodPost, d.http.URL+"/v1/leases", strings.NewReader(`{"namespace":"ns","ttlSeconds":60}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body wire.Error
	if resp.StatusCode >= 300 {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("HTTP %d without a JSON error body: %v", resp.StatusCode, err)
		}
	}
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return doorAnswer{resp.StatusCode, body.Error, ra}
}

func (d *doors) kubeAcquire(t *testing.T) doorAnswer {
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "alice"})
	pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{Name: "l1"}, Spec: leasingv1alpha1.ProxyLeaseSpec{TTLSeconds: ptr.To(int32(60))}}
	_, err := d.rest.Create(ctx, pl, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err == nil {
		return doorAnswer{201, "", 0}
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("Kubernetes door answered a bare error: %v", err)
	}
	st := status.Status()
	var ra int
	if st.Details != nil {
		ra = int(st.Details.RetryAfterSeconds)
	}
	return doorAnswer{int(st.Code), string(st.Reason), ra}
}
