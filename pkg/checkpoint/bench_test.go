package checkpoint

import (
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// BenchmarkEncode10kLeases is the CPU of one checkpoint of 10,000 leases
// and 1,000 cooldowns (what the writer spends per interval when something
// changed); the compressed size is reported as bytes/checkpoint.
func BenchmarkEncode10kLeases(b *testing.B) {
	st := lease.State{Revision: 20000}
	for i := range 10000 {
		p := lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("p%03d", i%100), URL: fmt.Sprintf("http://10.0.0.%d:3128", i%100), Host: "10.0.0.1", Port: 3128,
			Attributes: map[string]string{"tier": "gold", "region": "eu"}, Healthy: true}
		st.Leases = append(st.Leases, lease.Lease{ID: fmt.Sprintf("%032x", i), Namespace: "crawl", Name: fmt.Sprintf("%032x", i),
			Holder: "http:crawler", Flow: "http:crawler", Target: fmt.Sprintf("site-%d", i), Proxy: p,
			AcquiredAt: t0, ExpiresAt: t0.Add(time.Hour), TTL: time.Hour, Revision: uint64(i)})
	}
	for i := range 1000 {
		st.Cooldowns = append(st.Cooldowns, lease.Cooldown{Proxy: lease.ProxyKey{Namespace: "crawl", Name: fmt.Sprintf("p%03d", i%100)}, Target: fmt.Sprintf("cool-%d", i), Until: t0.Add(time.Hour)})
	}
	var size int
	b.ReportAllocs()
	for b.Loop() {
		data, err := encode(st, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "bytes/checkpoint")
}
