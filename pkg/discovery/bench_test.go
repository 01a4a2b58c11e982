//go:build unix

package discovery

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// benchServer: the real middleware stack over either the real routes or a
// no-op handler, on a loopback httptest server with keep-alive clients.
func benchServer(b *testing.B, noop bool) (*httptest.Server, *http.Client) {
	b.Helper()
	if !noop {
		return benchServerWith(b, nil)
	}
	return benchServerWith(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
}

// benchServerWith serves the real routes (noop nil) or noop, behind the
// real middleware chain.
func benchServerWith(b *testing.B, noop http.HandlerFunc) (*httptest.Server, *http.Client) {
	b.Helper()
	store, err := lease.New(lease.Options{MaxLeasesPerProxy: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		store.UpsertProxy(lease.ProxyInfo{Namespace: "ns", Name: fmt.Sprintf("p%04d", i), URL: "http://127.0.0.1:3128",
			Host: "127.0.0.1", Port: 3128, Attributes: map[string]string{"zone": fmt.Sprintf("z%d", i%4)}, LatencyMillis: int64(i % 50), Healthy: true})
	}
	s, err := New(Options{Tokens: SingleToken("bench-token"), Service: realService(b, store)})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	if noop != nil {
		// Same middleware chain (recover, log, body limit, auth), no work.
		h = s.wrap(noop)
	}
	// Requests carry the operator's logger (JSON at info, as
	// cmd/proxy-operator sets it up), writing nowhere.
	inner, logger := h, zap.New(zap.WriteTo(io.Discard))
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r.WithContext(log.IntoContext(r.Context(), logger)))
	})
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	b.Cleanup(tr.CloseIdleConnections)
	return srv, &http.Client{Transport: tr}
}

func benchDo(b *testing.B, c *http.Client, method, url, body string) []byte {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer bench-token")
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return nil
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		b.Errorf("%s %s: %d %s", method, url, resp.StatusCode, data)
	}
	return data
}

// BenchmarkHTTPAcquireRelease: POST /v1/leases + DELETE /v1/leases/{id} per
// op, 16 concurrent clients, 1,000 proxies. Compare with
// BenchmarkHTTPNoopPair (same stack, same two requests, no-op handler).
func BenchmarkHTTPAcquireRelease(b *testing.B) {
	srv, c := benchServer(b, false)
	b.SetParallelism(8)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	defer reportCPU(b, cpu0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			data := benchDo(b, c, "POST", srv.URL+"/v1/leases", `{"selector":{"zone":"z1"},"ttlSeconds":60}`)
			var l wire.Lease
			if err := json.Unmarshal(data, &l); err != nil {
				b.Error(err)
				return
			}
			benchDo(b, c, "DELETE", srv.URL+"/v1/leases/"+l.LeaseID, "")
		}
	})
}

func BenchmarkHTTPNoopPair(b *testing.B) {
	srv, c := benchServer(b, true)
	b.SetParallelism(8)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	defer reportCPU(b, cpu0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchDo(b, c, "POST", srv.URL+"/v1/leases", `{"selector":{"zone":"z1"},"ttlSeconds":60}`)
			benchDo(b, c, "DELETE", srv.URL+"/v1/leases/0123456789abcdef0123456789abcdef", "")
		}
	})
}

// cpuTime is this process's user+system CPU time: on a shared machine it
// measures the work, where wall ns/op also measures the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a cpu-ns/op metric measured since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
