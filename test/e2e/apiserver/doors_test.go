package apiservere2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// view is a lease as a crawler sees it through either API, or why it has
// none: "no_match" (409 on both) or "ended" (HTTP 410, Kubernetes 404).
type view struct {
	Proxy, URL string
	Healthy    bool
	TTLSeconds int64
	Failure    string
}

// ask is one acquire, in the terms both APIs share.
type ask struct {
	selector    map[string]string
	target      string
	ttlSeconds  int64
	waitSeconds int64
}

// door is one lease API, reduced to what the table compares.
type door struct {
	name string
	// api is the door's proxy_operator_lease_requests_total{api} label.
	api string
	// acquire leases a proxy of ns as a asks; the handle names the lease
	// for get.
	acquire func(t *testing.T, ns string, a ask) (handle string, v view)
	// get reads the lease again.
	get func(t *testing.T, ns, handle string) view
}

func httpDoor(t *testing.T) door {
	c, err := client.New(shared.httpURL, "")
	if err != nil {
		t.Fatal(err)
	}
	fromErr := func(t *testing.T, err error) view {
		var apiErr *client.APIError
		switch {
		case client.IsNoMatch(err):
			return view{Failure: "no_match"}
		case client.IsLeaseEnded(err):
			return view{Failure: "ended"}
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusBadRequest:
			return view{Failure: "invalid"}
		}
		t.Fatalf("HTTP API: unexpected error %v", err)
		return view{}
	}
	fromLease := func(l *wire.Lease) view {
		return view{Proxy: l.Proxy.Name, URL: l.Proxy.URL, Healthy: l.ProxyHealthy, TTLSeconds: l.TTLSeconds}
	}
	return door{
		name: "http",
		api:  leasing.APIHTTP,
		acquire: func(t *testing.T, ns string, a ask) (string, view) {
			l, err := c.Acquire(context.Background(), wire.AcquireRequest{Namespace: ns, Selector: a.selector, Target: a.target, TTLSeconds: a.ttlSeconds, WaitSeconds: a.waitSeconds})
			if err != nil {
				return "", fromErr(t, err)
			}
			return l.LeaseID, fromLease(l)
		},
		get: func(t *testing.T, _, id string) view {
			l, err := c.Get(context.Background(), id)
			if err != nil {
				return fromErr(t, err)
			}
			return fromLease(l)
		},
	}
}

func kubernetesDoor() door {
	fromErr := func(t *testing.T, err error) view {
		switch {
		case apierrors.IsConflict(err):
			return view{Failure: "no_match"}
		case apierrors.IsNotFound(err):
			return view{Failure: "ended"}
		case apierrors.IsInvalid(err):
			return view{Failure: "invalid"}
		}
		t.Fatalf("Kubernetes API: unexpected error %v", err)
		return view{}
	}
	fromObject := func(pl *leasingv1alpha1.ProxyLease) view {
		v := view{TTLSeconds: int64(ptr.Deref(pl.Spec.TTLSeconds, 0))}
		if p := pl.Status.Proxy; p != nil {
			v.Proxy, v.URL = p.Name, p.URL
		}
		v.Healthy = meta.IsStatusConditionTrue(pl.Status.Conditions, leasingv1alpha1.ConditionProxyHealthy)
		return v
	}
	return door{
		name: "kubernetes",
		api:  leasing.APIKubernetes,
		acquire: func(t *testing.T, ns string, a ask) (string, view) {
			pl := newLease("doors-")
			pl.Spec.Target, pl.Spec.Selector, pl.Spec.TTLSeconds = a.target, a.selector, ptr.To(int32(a.ttlSeconds))
			pl.Spec.WaitSeconds = int32(a.waitSeconds)
			got, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Create(context.Background(), pl, metav1.CreateOptions{})
			if err != nil {
				return "", fromErr(t, err)
			}
			return got.Name, fromObject(got)
		},
		get: func(t *testing.T, ns, name string) view {
			got, err := shared.leasing.LeasingV1alpha1().ProxyLeases(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return fromErr(t, err)
			}
			return fromObject(got)
		},
	}
}

// The two lease APIs answer the same requests the same way and count them
// the same way: one table, both doors, including a lease whose proxy is
// replaced, turns unhealthy and is deleted, a TTL over the maximum, and a
// wait that runs out.
func TestBothAPIsAnswerTheSame(t *testing.T) {
	const oldURL, newURL = "http://127.0.0.1:3128", "http://127.0.0.250:3128"
	moved := func(p lease.ProxyInfo) lease.ProxyInfo {
		p.URL, p.Host = newURL, "127.0.0.250"
		return p
	}
	sick := func(p lease.ProxyInfo) lease.ProxyInfo {
		p.Healthy = false
		return p
	}
	doors := map[string]string{"pool": "doors"}
	tests := []struct {
		name string
		ask  ask
		// taken: the proxy is leased to someone else first.
		taken bool
		// then changes the proxy after the grant (nil: nothing).
		then func(p lease.ProxyInfo)
		// wantGrant is the answer to the acquire; wantAfter the lease read
		// again after then; wantCounted what proxy_operator_lease_requests_total counts.
		wantGrant, wantAfter view
		wantCounted          string
	}{{
		name:        "grant",
		ask:         ask{selector: doors, ttlSeconds: 90},
		wantGrant:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantCounted: leasing.OutcomeGranted,
	}, {
		name:        "no proxy matches",
		ask:         ask{selector: map[string]string{"pool": "elsewhere"}, ttlSeconds: 90},
		wantGrant:   view{Failure: "no_match"},
		wantCounted: leasing.OutcomeNoMatch,
	}, {
		name:        "a TTL over the maximum",
		ask:         ask{selector: doors, ttlSeconds: 7201},
		wantGrant:   view{Failure: "invalid"},
		wantCounted: leasing.OutcomeBadRequest,
	}, {
		// One set of request limits: what one API refuses, the other does.
		name:        "a target over 253 bytes",
		ask:         ask{selector: doors, target: strings.Repeat("a", 254), ttlSeconds: 90},
		wantGrant:   view{Failure: "invalid"},
		wantCounted: leasing.OutcomeBadRequest,
	}, {
		name:        "a target with a space",
		ask:         ask{selector: doors, target: "example .com", ttlSeconds: 90},
		wantGrant:   view{Failure: "invalid"},
		wantCounted: leasing.OutcomeBadRequest,
	}, {
		name:        "a selector value over 253 bytes",
		ask:         ask{selector: map[string]string{"pool": strings.Repeat("d", 254)}, ttlSeconds: 90},
		wantGrant:   view{Failure: "invalid"},
		wantCounted: leasing.OutcomeBadRequest,
	}, {
		name:        "a target of 253 bytes is taken by both",
		ask:         ask{selector: doors, target: strings.Repeat("a", 253), ttlSeconds: 90},
		wantGrant:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantCounted: leasing.OutcomeGranted,
	}, {
		name:        "a wait that runs out",
		ask:         ask{selector: doors, ttlSeconds: 90, waitSeconds: 1},
		taken:       true,
		wantGrant:   view{Failure: "no_match"},
		wantCounted: leasing.OutcomeNoMatch,
	}, {
		name:        "the proxy's instance is replaced: the lease shows its new address",
		ask:         ask{selector: doors, ttlSeconds: 90},
		then:        func(p lease.ProxyInfo) { shared.store.UpsertProxy(moved(p)) },
		wantGrant:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter:   view{Proxy: "px", URL: newURL, Healthy: true, TTLSeconds: 90},
		wantCounted: leasing.OutcomeGranted,
	}, {
		name:        "the proxy turns unhealthy: the lease says so",
		ask:         ask{selector: doors, ttlSeconds: 90},
		then:        func(p lease.ProxyInfo) { shared.store.UpsertProxy(sick(p)) },
		wantGrant:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter:   view{Proxy: "px", URL: oldURL, Healthy: false, TTLSeconds: 90},
		wantCounted: leasing.OutcomeGranted,
	}, {
		name:        "the Proxy is deleted: the lease ends",
		ask:         ask{selector: doors, ttlSeconds: 90},
		then:        func(p lease.ProxyInfo) { shared.store.RemoveProxy(p.Key()) },
		wantGrant:   view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter:   view{Failure: "ended"},
		wantCounted: leasing.OutcomeGranted,
	}}
	for _, d := range []door{httpDoor(t), kubernetesDoor()} {
		for i, tt := range tests {
			t.Run(d.name+"/"+tt.name, func(t *testing.T) {
				ns := namespace(t, fmt.Sprintf("doors-%s-%d", d.name, i))
				p := addProxy(t, ns, "px", doors)
				if tt.taken {
					if _, err := shared.store.Acquire(lease.AcquireRequest{Namespace: ns, Holder: "someone-else", Flow: "someone-else"}); err != nil {
						t.Fatal(err)
					}
				}
				counted := shared.outcomes.count(d.api)
				handle, got := d.acquire(t, ns, tt.ask)
				if diff := cmp.Diff(tt.wantGrant, got); diff != "" {
					t.Fatalf("acquire (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{tt.wantCounted}, shared.outcomes.since(d.api, counted)); diff != "" {
					t.Errorf("proxy_operator_lease_requests_total{api=%q} counted (-want +got):\n%s", d.api, diff)
				}
				if tt.wantGrant.Failure != "" {
					return
				}
				if tt.then != nil {
					tt.then(p)
				}
				if diff := cmp.Diff(tt.wantAfter, d.get(t, ns, handle)); diff != "" {
					t.Errorf("the lease read again (-want +got):\n%s", diff)
				}
			})
		}
	}
}
