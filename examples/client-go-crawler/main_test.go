package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned/fake"
)

// forwardProxy is a minimal HTTP forward proxy that counts what it forwarded.
func forwardProxy(t *testing.T) (*httptest.Server, *int) {
	t.Helper()
	var n int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		n++
		out := r.Clone(r.Context())
		out.RequestURI = ""
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestRunLeasesFetchesReportsAndDeletes(t *testing.T) {
	for _, tt := range []struct {
		origin int
		want   leasingv1alpha1.ReportResult
	}{
		{http.StatusOK, leasingv1alpha1.ResultOK},
		{http.StatusTooManyRequests, leasingv1alpha1.ResultRateLimited},
		{http.StatusForbidden, leasingv1alpha1.ResultBanned},
	} {
		t.Run(string(tt.want), func(t *testing.T) {
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.origin)
				_, _ = w.Write([]byte("hello"))
			}))
			defer origin.Close()
			proxy, forwarded := forwardProxy(t)

			client := fake.NewSimpleClientset()
			var reports []leasingv1alpha1.ProxyLeaseReport
			client.PrependReactor("create", "proxyleases", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "report" {
					reports = append(reports, *a.(clienttesting.CreateAction).GetObject().(*leasingv1alpha1.ProxyLeaseReport))
					return true, &metav1.Status{Status: metav1.StatusSuccess, Message: "reported"}, nil
				}
				pl := a.(clienttesting.CreateAction).GetObject().(*leasingv1alpha1.ProxyLease).DeepCopy()
				pl.Name = pl.GenerateName + "abcde"
				now := metav1.NewTime(time.Now().Add(time.Minute))
				pl.Status = leasingv1alpha1.ProxyLeaseStatus{ExpireTime: &now, Proxy: &leasingv1alpha1.LeasedProxy{Name: "px", URL: proxy.URL}}
				return true, pl, nil
			})
			var deleted []string
			client.PrependReactor("delete", "proxyleases", func(a clienttesting.Action) (bool, runtime.Object, error) {
				deleted = append(deleted, a.(clienttesting.DeleteAction).GetName())
				return true, nil, nil
			})

			var out bytes.Buffer
			cfg := config{target: origin.URL + "/page", selector: map[string]string{"region": "eu"}, ttl: time.Minute, timeout: 5 * time.Second}
			if err := run(context.Background(), client.LeasingV1alpha1().ProxyLeases("crawlers"), cfg, &out); err != nil {
				t.Fatal(err)
			}
			createAction := client.Actions()[0].(clienttesting.CreateAction)
			created := createAction.GetObject().(*leasingv1alpha1.ProxyLease)
			host, _ := url.Parse(origin.URL)
			if created.GenerateName != "crawler-" || created.Spec.Target != host.Hostname() || *created.Spec.TTLSeconds != 60 ||
				created.Spec.Selector["region"] != "eu" || createAction.GetNamespace() != "crawlers" {
				t.Errorf("created %+v", created)
			}
			if *forwarded != 1 {
				t.Errorf("the proxy forwarded %d requests, want 1", *forwarded)
			}
			if diff := cmp.Diff([]leasingv1alpha1.ReportResult{tt.want}, resultsOf(reports)); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"crawler-abcde"}, deleted); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			if !strings.Contains(out.String(), fmt.Sprintf("HTTP %d", tt.origin)) {
				t.Errorf("output %q", out.String())
			}
		})
	}
}

func resultsOf(rs []leasingv1alpha1.ProxyLeaseReport) []leasingv1alpha1.ReportResult {
	var out []leasingv1alpha1.ReportResult
	for _, r := range rs {
		out = append(out, r.Result)
	}
	return out
}

func TestRunExplainsNoProxyAndDeletesNothing(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "proxyleases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(leasingv1alpha1.Resource("proxyleases"), "crawler-x",
			&noProxy{"every matching Proxy is at capacity (leased): considered 2, at capacity 2"})
	})
	err := run(context.Background(), client.LeasingV1alpha1().ProxyLeases("ns"),
		config{target: "http://example.com/", ttl: time.Minute, timeout: time.Second}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no proxy free") || !strings.Contains(err.Error(), "at capacity 2") {
		t.Errorf("err = %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			t.Error("deleted a lease it never got")
		}
	}
}

type noProxy struct{ msg string }

func (e *noProxy) Error() string { return e.msg }

func TestParseSelector(t *testing.T) {
	got, err := parseSelector("region=eu,tier=gold")
	if err != nil || !cmp.Equal(got, map[string]string{"region": "eu", "tier": "gold"}) {
		t.Errorf("parseSelector = %v, %v", got, err)
	}
	if _, err := parseSelector("region"); err == nil {
		t.Error("a pair without = was accepted")
	}
}
