package apiservere2e

import (
	"context"
	"fmt"
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
)

// view is a lease as a crawler sees it through either API, or why it has
// none: "no_match" (409 on both) or "ended" (HTTP 410, Kubernetes 404).
type view struct {
	Proxy, URL string
	Healthy    bool
	TTLSeconds int64
	Failure    string
}

// door is one lease API, reduced to what the table compares.
type door struct {
	name string
	// acquire leases a proxy of ns matching selector for 90s; the handle
	// names the lease for get.
	acquire func(t *testing.T, ns string, selector map[string]string) (handle string, v view)
	// get reads the lease again.
	get func(t *testing.T, ns, handle string) view
}

func httpDoor(t *testing.T) door {
	c, err := client.New(shared.httpURL, "")
	if err != nil {
		t.Fatal(err)
	}
	fromErr := func(t *testing.T, err error) view {
		switch {
		case client.IsNoMatch(err):
			return view{Failure: "no_match"}
		case client.IsLeaseEnded(err):
			return view{Failure: "ended"}
		}
		t.Fatalf("HTTP API: unexpected error %v", err)
		return view{}
	}
	fromLease := func(l *wire.Lease) view {
		return view{Proxy: l.Proxy.Name, URL: l.Proxy.URL, Healthy: l.ProxyHealthy, TTLSeconds: l.TTLSeconds}
	}
	return door{
		name: "http",
		acquire: func(t *testing.T, ns string, selector map[string]string) (string, view) {
			l, err := c.Acquire(context.Background(), wire.AcquireRequest{Namespace: ns, Selector: selector, TTLSeconds: 90})
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
		acquire: func(t *testing.T, ns string, selector map[string]string) (string, view) {
			pl := newLease("doors-")
			pl.Spec.Target, pl.Spec.Selector, pl.Spec.TTLSeconds = "", selector, ptr.To[int32](90)
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

// The two lease APIs answer the same requests the same way: one table, both
// doors, including a lease whose proxy is replaced, turns unhealthy and is
// deleted.
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
	tests := []struct {
		name     string
		selector map[string]string
		// then changes the proxy after the grant (nil: nothing).
		then func(p lease.ProxyInfo)
		// wantGrant is the answer to the acquire; wantAfter the lease read
		// again after then.
		wantGrant, wantAfter view
	}{{
		name:      "grant",
		selector:  map[string]string{"pool": "doors"},
		wantGrant: view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter: view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
	}, {
		name:      "no proxy matches",
		selector:  map[string]string{"pool": "elsewhere"},
		wantGrant: view{Failure: "no_match"},
	}, {
		name:      "the proxy's instance is replaced: the lease shows its new address",
		selector:  map[string]string{"pool": "doors"},
		then:      func(p lease.ProxyInfo) { shared.store.UpsertProxy(moved(p)) },
		wantGrant: view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter: view{Proxy: "px", URL: newURL, Healthy: true, TTLSeconds: 90},
	}, {
		name:      "the proxy turns unhealthy: the lease says so",
		selector:  map[string]string{"pool": "doors"},
		then:      func(p lease.ProxyInfo) { shared.store.UpsertProxy(sick(p)) },
		wantGrant: view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter: view{Proxy: "px", URL: oldURL, Healthy: false, TTLSeconds: 90},
	}, {
		name:      "the Proxy is deleted: the lease ends",
		selector:  map[string]string{"pool": "doors"},
		then:      func(p lease.ProxyInfo) { shared.store.RemoveProxy(p.Key()) },
		wantGrant: view{Proxy: "px", URL: oldURL, Healthy: true, TTLSeconds: 90},
		wantAfter: view{Failure: "ended"},
	}}
	for _, d := range []door{httpDoor(t), kubernetesDoor()} {
		for i, tt := range tests {
			t.Run(d.name+"/"+tt.name, func(t *testing.T) {
				ns := namespace(t, fmt.Sprintf("doors-%s-%d", d.name, i))
				p := addProxy(t, ns, "px", map[string]string{"pool": "doors"})
				handle, got := d.acquire(t, ns, tt.selector)
				if diff := cmp.Diff(tt.wantGrant, got); diff != "" {
					t.Fatalf("acquire (-want +got):\n%s", diff)
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
