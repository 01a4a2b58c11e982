package leasing_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	store *lease.Store
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
	return &doors{store: store, queue: q, http: ts, rest: r}
}

func (d *doors) httpAcquire(t *testing.T) doorAnswer {
	resp := d.post(t, `{"namespace":"ns","ttlSeconds":60}`)
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

// Both doors take a ladder of selectors by the same rules, grant on the
// tier the store climbs to and say it (HTTP "tier", ProxyLease status.tier),
// and name the tier of a no match past the first (HTTP "tier", the Status
// cause LadderTier); a ladder beside a selector, an empty one and one of
// five tiers are refused by both, naming the field.
func TestBothDoorsClimbALadder(t *testing.T) {
	e := newDoors(t, false)
	for i, tier := range []string{"cheap", "premium"} {
		name := []string{"px", "premium"}[i]
		e.store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: name, URL: fmt.Sprintf("http://127.0.0.%d:3128", 9+i), Host: fmt.Sprintf("127.0.0.%d", 9+i), Port: 3128,
			Attributes: map[string]string{"tier": tier}, Healthy: true})
	}
	// Cool the cheap tier (newDoors' px) for the site.
	cooled, err := e.store.Acquire(lease.AcquireRequest{Namespace: "ns", Selector: map[string]string{"tier": "cheap"}, Target: "shop.example"})
	if err != nil || cooled.Proxy.Name != "px" {
		t.Fatalf("leasing px: %v, %+v", err, cooled)
	}
	if err := e.store.Report(cooled.ID, lease.ResultBanned, "shop.example"); err != nil {
		t.Fatal(err)
	}
	e.store.Release(cooled.ID)
	ladder := []map[string]string{{"tier": "none"}, {"tier": "cheap"}, {"tier": "premium"}}
	// Tier 0 matches no proxy and tier 1 (px) cools: tier 2.
	for _, tc := range []struct {
		name, http string
		spec       leasingv1alpha1.ProxyLeaseSpec
		field      string
	}{
		{"a ladder beside a selector", `{"selector":{"a":"b"},"selectors":[{}]}`,
			leasingv1alpha1.ProxyLeaseSpec{Selector: map[string]string{"a": "b"}, Selectors: []map[string]string{{}}}, "selectors"},
		{"an empty ladder", `{"selectors":[]}`, leasingv1alpha1.ProxyLeaseSpec{Selectors: []map[string]string{}}, "selectors"},
		{"five tiers", `{"selectors":[{},{},{},{},{}]}`, leasingv1alpha1.ProxyLeaseSpec{Selectors: make([]map[string]string, 5)}, "selectors"},
		{"a broken tier", `{"selectors":[{},{"":"x"}]}`, leasingv1alpha1.ProxyLeaseSpec{Selectors: []map[string]string{{}, {"": "x"}}}, "selectors[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.httpAcquireBody(t, tc.http)
			if status != 400 || body.Err.Error != wire.CodeInvalidRequest || !strings.Contains(body.Err.Message, tc.field) {
				t.Errorf("HTTP: %d %+v, want 400 invalid_request naming %s", status, body, tc.field)
			}
			_, err := e.kubeCreate(t, tc.spec)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec."+tc.field) {
				t.Errorf("Kubernetes: %v, want 422 naming spec.%s", err, tc.field)
			}
		})
	}

	ladderJSON := `{"namespace":"ns","selectors":[{"tier":"none"},{"tier":"cheap"},{"tier":"premium"}],"target":"shop.example"}`
	status, body := e.httpAcquireBody(t, ladderJSON)
	if status != 201 || body.Lease.Tier != 2 || body.Lease.Proxy.Name != "premium" {
		t.Fatalf("HTTP: %d %+v, want premium on tier 2", status, body)
	}
	e.store.Release(body.Lease.LeaseID)
	obj, err := e.kubeCreate(t, leasingv1alpha1.ProxyLeaseSpec{Selectors: ladder, Target: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	if pl := obj.(*leasingv1alpha1.ProxyLease); pl.Status.Tier != 2 || pl.Status.Proxy.Name != "premium" || len(pl.Spec.Selectors) != 3 {
		t.Errorf("Kubernetes: status %+v spec %+v, want premium on tier 2, the ladder kept", pl.Status, pl.Spec)
	}

	// The last tier cannot serve either: a no match of tier 2.
	e.store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: "premium", URL: "http://127.0.0.10:3128", Host: "127.0.0.10", Port: 3128,
		Attributes: map[string]string{"tier": "premium"}})
	status, body = e.httpAcquireBody(t, ladderJSON)
	if status != 409 || body.Err.Error != wire.CodeNoMatch || body.Err.Tier != 2 || !strings.Contains(body.Err.Message, "tier 2") {
		t.Errorf("HTTP with premium down: %d %+v, want 409 no_match on tier 2", status, body)
	}
	_, err = e.kubeCreate(t, leasingv1alpha1.ProxyLeaseSpec{Selectors: ladder, Target: "shop.example"})
	if !apierrors.IsConflict(err) || !hasCause(err, proxylease.CauseLadderTier, "2") || !strings.Contains(err.Error(), "tier 2") {
		t.Errorf("Kubernetes with premium down: %v, want 409 with the cause LadderTier 2", err)
	}
}

// post sends an acquire of body to the HTTP door with its token.
func (d *doors) post(t *testing.T, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.http.URL+"/v1/leases", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// httpBody is an HTTP answer: a lease or an error.
type httpBody struct {
	Err   wire.Error
	Lease wire.Lease
}

func (d *doors) httpAcquireBody(t *testing.T, body string) (int, httpBody) {
	t.Helper()
	resp := d.post(t, body)
	defer resp.Body.Close()
	var out httpBody
	into := any(&out.Err)
	if resp.StatusCode < 300 {
		into = &out.Lease
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func (d *doors) kubeCreate(t *testing.T, spec leasingv1alpha1.ProxyLeaseSpec) (runtime.Object, error) {
	t.Helper()
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "alice"})
	spec.TTLSeconds = ptr.To(int32(60))
	pl := &leasingv1alpha1.ProxyLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "l-"}, Spec: spec}
	return d.rest.Create(ctx, pl, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
}

func hasCause(err error, typ metav1.CauseType, msg string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Type == typ && c.Message == msg {
			return true
		}
	}
	return false
}
