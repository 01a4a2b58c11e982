package checkpoint

import (
	"fmt"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// BenchmarkEncode is the CPU of one checkpoint of 10,000 and 100,000 leases
// with a tenth as many cooldowns (what the writer spends per interval when
// something changed); the compressed size is reported as bytes/checkpoint,
// and shards/checkpoint is how many Secrets it takes.
func BenchmarkEncode(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) { benchmarkEncode(b, n) })
	}
}

func benchmarkEncode(b *testing.B, leases int) {
	st := lease.State{Revision: uint64(2 * leases)}
	for i := range leases {
		p := lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("p%03d", i%100), URL: fmt.Sprintf("http://10.0.0.%d:3128", i%100), Host: "10.0.0.1", Port: 3128,
			Attributes: map[string]string{"tier": "gold", "region": "eu"}, Healthy: true}
		st.Leases = append(st.Leases, lease.Lease{ID: fmt.Sprintf("%032x", i), Namespace: "crawl", Name: fmt.Sprintf("%032x", i),
			Holder: "http:crawler", Flow: "http:crawler", Target: fmt.Sprintf("site-%d", i), Proxy: p,
			AcquiredAt: t0, ExpiresAt: t0.Add(time.Hour), TTL: time.Hour, Revision: uint64(i)})
	}
	for i := range leases / 10 {
		st.Cooldowns = append(st.Cooldowns, lease.Cooldown{Proxy: lease.ProxyKey{Namespace: "crawl", Name: fmt.Sprintf("p%03d", i%100)}, Target: fmt.Sprintf("cool-%d", i), Until: t0.Add(time.Hour)})
	}
	var size int
	// One encoder, as a Checkpointer keeps: its buffers are reused.
	enc := &encoder{}
	b.ReportAllocs()
	for b.Loop() {
		data, err := enc.encode(&st, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "bytes/checkpoint")
	b.ReportMetric(float64((size+shardBytes-1)/shardBytes), "shards/checkpoint")
}
