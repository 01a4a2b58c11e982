package checkpoint

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
)

// BenchmarkEncode is the CPU of one checkpoint (what the writer spends per
// interval when something changed): 10,000 and 100,000 leases on 100
// proxies with 32-character IDs and a tenth as many cooldowns, and the
// scale the operator is sized for, 100,000 leases with signed IDs (pkg/
// leaseid, about 180 characters) over 10,000 proxies with 100,000
// cooldowns. The compressed size is reported as bytes/checkpoint, and
// shards/checkpoint is how many Secrets it takes.
func BenchmarkEncode(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) { benchmarkEncode(b, n, 100, n/10, nil) })
	}
	signer := leaseid.NewSigner()
	if err := signer.SetKey([]byte(strings.Repeat("k", leaseid.KeySize))); err != nil {
		b.Fatal(err)
	}
	b.Run("leases=100000,proxies=10000,cooldowns=100000,signed", func(b *testing.B) { benchmarkEncode(b, 100000, 10000, 100000, signer) })
}

func benchmarkEncode(b *testing.B, leases, proxies, cooldowns int, signer *leaseid.Signer) {
	st := lease.State{Revision: uint64(2 * leases)}
	for i := range leases {
		p := lease.ProxyInfo{Namespace: "crawl", Name: fmt.Sprintf("p%05d", i%proxies), URL: fmt.Sprintf("http://10.0.%d.%d:3128", i%proxies/250, i%250), Host: "10.0.0.1", Port: 3128,
			Attributes: map[string]string{"tier": "gold", "region": "eu"}, Healthy: true}
		l := lease.Lease{ID: fmt.Sprintf("%032x", i), Namespace: "crawl",
			Holder: "http:crawler", Flow: "http:crawler", Target: fmt.Sprintf("site-%d", i), Proxy: p,
			AcquiredAt: t0, ExpiresAt: t0.Add(time.Hour), TTL: time.Hour, Revision: uint64(i)}
		if signer != nil {
			l.ID = signer.NewID(&l)
		}
		l.Name = l.ID
		st.Leases = append(st.Leases, l)
	}
	for i := range cooldowns {
		st.Cooldowns = append(st.Cooldowns, lease.Cooldown{Proxy: lease.ProxyKey{Namespace: "crawl", Name: fmt.Sprintf("p%05d", i%proxies)}, Target: fmt.Sprintf("cool-%d", i), Until: t0.Add(time.Hour)})
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
