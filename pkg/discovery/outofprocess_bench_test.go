//go:build unix

package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// The out-of-process HTTP benchmark: the server (the real one, or the same
// middleware over a no-op handler) runs in this process, the clients in a
// child process (this test binary, re-executed as TestHTTPLoadProcess), so
// the two do not share a Go runtime and this process's CPU is the server's.
const httpLoadEnv = "PROXY_OPERATOR_HTTP_LOAD"

type httpLoad struct {
	URL   string
	Conns int
	Pairs int
}

// noopLeaseBody is what the no-op handler answers a POST: a body of the size
// of a real lease answer, so both sides move the same bytes.
func noopLeaseBody(b *testing.B, srvURL string, c *http.Client) []byte {
	b.Helper()
	data := benchDo(b, c, "POST", srvURL+"/v1/leases", `{"selector":{"zone":"z1"},"ttlSeconds":60}`)
	var l wire.Lease
	if err := json.Unmarshal(data, &l); err != nil {
		b.Fatal(err)
	}
	benchDo(b, c, "DELETE", srvURL+"/v1/leases/"+l.LeaseID, "")
	return data
}

// BenchmarkHTTPOutOfProcess: acquire+release pairs (POST /v1/leases, DELETE
// /v1/leases/{id}) from a load generator in its own process, 16 and 64
// keep-alive connections, against the real API and against the same stack
// (recover, request log, body limit, bearer auth) over a handler that only
// answers (a body of the same size for the POST). b.N is the pairs per run.
//
//	go test ./pkg/discovery -run '^$' -bench OutOfProcess -benchtime 20000x -count 3
func BenchmarkHTTPOutOfProcess(b *testing.B) {
	real, c := benchServer(b, false)
	body := noopLeaseBody(b, real.URL, c)
	noop, _ := benchServerWith(b, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for _, conns := range []int{16, 64} {
		for _, target := range []struct {
			name, url string
		}{{"lease", real.URL}, {"noop", noop.URL}} {
			b.Run(fmt.Sprintf("%s/conns=%d", target.name, conns), func(b *testing.B) {
				spec, err := json.Marshal(httpLoad{URL: target.url, Conns: conns, Pairs: b.N})
				if err != nil {
					b.Fatal(err)
				}
				cpu0 := cpuTime()
				cmd := exec.Command(os.Args[0], "-test.run=^TestHTTPLoadProcess$", "-test.bench=^$", "-test.v")
				cmd.Env = append(os.Environ(), httpLoadEnv+"="+string(spec))
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("load generator: %v\n%s", err, out)
				}
				rate := 0.0
				for line := range strings.Lines(string(out)) {
					if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PAIRS/S "); ok {
						rate, _ = strconv.ParseFloat(v, 64)
					}
				}
				if rate == 0 {
					b.Fatalf("load generator printed no rate:\n%s", out)
				}
				b.ReportMetric(rate, "pairs/s")
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "server-µs/pair")
			})
		}
	}
}

// TestHTTPLoadProcess is BenchmarkHTTPOutOfProcess's client process, not a
// test: without its environment it does nothing.
func TestHTTPLoadProcess(t *testing.T) {
	raw := os.Getenv(httpLoadEnv)
	if raw == "" {
		t.Skip("client process of BenchmarkHTTPOutOfProcess")
	}
	var spec httpLoad
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConns: spec.Conns, MaxIdleConnsPerHost: spec.Conns, MaxConnsPerHost: spec.Conns}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	do := func(ctx context.Context, method, url, body string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer bench-token")
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			return nil, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, data)
		}
		return data, err
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range spec.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for next.Add(1) <= int64(spec.Pairs) && failed.Load() == nil {
				data, err := do(ctx, "POST", spec.URL+"/v1/leases", `{"selector":{"zone":"z1"},"ttlSeconds":60}`)
				var l wire.Lease
				if err == nil {
					err = json.Unmarshal(data, &l)
				}
				if err == nil {
					_, err = do(ctx, "DELETE", spec.URL+"/v1/leases/"+l.LeaseID, "")
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(*err)
	}
	fmt.Printf("PAIRS/S %f\n", float64(spec.Pairs)/time.Since(start).Seconds())
}
