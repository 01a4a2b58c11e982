//go:build unix

package discovery

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	stdlog "log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// The out-of-process HTTP benchmark: the server runs in this process, the
// clients in a child process (this test binary, re-executed as
// TestHTTPLoadProcess), so the two do not share a Go runtime and this
// process's CPU is the server's. Every server speaks TLS, as the operator's
// API does.
const httpLoadEnv = "PROXY_OPERATOR_HTTP_LOAD"

// An operator to measure instead of the in-process API (for example the one
// `make dev` runs): its base URL, bearer token and CA certificate file
// (.dev/discovery-url, .dev/discovery-token, .dev/ca.crt).
const (
	benchURLEnv   = "PROXY_OPERATOR_BENCH_URL"
	benchTokenEnv = "PROXY_OPERATOR_BENCH_TOKEN"
	benchCAEnv    = "PROXY_OPERATOR_BENCH_CA"
	// benchWrkEnv, set to a number of seconds, drives each server with wrk
	// (a C load generator, far cheaper per request than Go's client, so the
	// server rather than the client sets the rate) for that long instead
	// of with the Go child.
	benchWrkEnv = "PROXY_OPERATOR_BENCH_WRK_SECONDS"
)

// wrkPairs is the wrk script: each thread alternates acquires and releases
// of the leases its connections were granted; a non-2xx answer is counted
// by wrk and fails the run.
const wrkPairs = `
local token = os.getenv("BENCH_TOKEN")
local body = '{"selector":{"zone":"z1"},"ttlSeconds":60}'
local granted = {}
request = function()
  local id = table.remove(granted)
  if id then
    return wrk.format("DELETE", "/v1/leases/" .. id, {["Authorization"] = "Bearer " .. token})
  end
  return wrk.format("POST", "/v1/leases", {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}, body)
end
response = function(status, headers, body)
  if status == 201 then
    table.insert(granted, body:match('"leaseID":"([^"]+)"'))
  end
end
`

// runWrk drives target with wrk over conns connections for secs seconds
// and returns acquire+release pairs per second.
func runWrk(b *testing.B, target benchTarget, conns int, secs string) float64 {
	b.Helper()
	script := filepath.Join(b.TempDir(), "pairs.lua")
	if err := os.WriteFile(script, []byte(wrkPairs), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("wrk", "-t", "2", "-c", strconv.Itoa(conns), "-d", secs+"s", "-s", script, target.url)
	cmd.Env = append(os.Environ(), "BENCH_TOKEN="+target.token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	rate := 0.0
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "Requests/sec:"); ok {
			rate, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if strings.HasPrefix(line, "Non-2xx") || strings.HasPrefix(line, "Socket errors") {
			b.Fatalf("wrk saw failures:\n%s", out)
		}
	}
	if rate == 0 {
		b.Fatalf("wrk printed no rate:\n%s", out)
	}
	return rate / 2
}

type httpLoad struct {
	URL    string
	Token  string
	CAFile string
	Conns  int
	Pairs  int
}

// benchTarget is one server the load generator drives.
type benchTarget struct {
	name, url, token, caFile string
	// own: the server runs in this process, whose CPU is then its.
	own bool
}

// noopLeaseBody is what the no-op handlers answer a POST: a body of the size
// of a real lease answer, so every server moves the same bytes.
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

// answerOnly answers as the API does (a lease-sized body for the POST, 204
// for the DELETE) and does nothing else.
func answerOnly(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// bareHandler is the true limit of the stack: the bearer check and the
// same answers as the API, no middleware, no store.
func bareHandler(body []byte) http.HandlerFunc {
	want := sha256.Sum256([]byte("bench-token"))
	answer := answerOnly(body)
	return func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		answer(w, r)
	}
}

// tlsServer serves h over TLS on loopback and writes its certificate where
// the load generator can trust it.
func tlsServer(b *testing.B, h http.Handler) (url, caFile string) {
	b.Helper()
	srv := httptest.NewUnstartedServer(h)
	// wrk ends its connections abruptly: not worth a log line each.
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0)
	srv.StartTLS()
	b.Cleanup(srv.Close)
	caFile = filepath.Join(b.TempDir(), "ca.crt")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		b.Fatal(err)
	}
	return srv.URL, caFile
}

// BenchmarkHTTPOutOfProcess: acquire+release pairs (POST /v1/leases, DELETE
// /v1/leases/{id}) from a load generator in its own process, over 16 and 64
// keep-alive TLS connections, against
//   - lease: the real API (middleware, leasing Service, wait queue, store),
//     with the operator's JSON logger at info;
//   - chain: the same middleware (recover, request log, body limit, bearer
//     auth) over a handler that only answers;
//   - bare: a handler that checks the bearer token and answers the same
//     bodies, nothing else (the true limit);
//   - external: with PROXY_OPERATOR_BENCH_URL, _TOKEN and _CA set, that
//     operator (for example `make dev`'s), beside bare.
//
// b.N is the pairs per run; with PROXY_OPERATOR_BENCH_WRK_SECONDS, wrk
// drives each server for that long instead (run -benchtime 1x).
//
//	go test ./pkg/discovery -run '^$' -bench OutOfProcess -benchtime 20000x -count 3
//	PROXY_OPERATOR_BENCH_WRK_SECONDS=10 go test ./pkg/discovery -run '^$' -bench OutOfProcess -benchtime 1x -count 3
func BenchmarkHTTPOutOfProcess(b *testing.B) {
	real, c := benchServer(b, false)
	body := noopLeaseBody(b, real.URL, c)
	leaseURL, leaseCA := tlsServer(b, real.Config.Handler)
	chain, _ := benchServerWith(b, answerOnly(body))
	chainURL, chainCA := tlsServer(b, chain.Config.Handler)
	bareURL, bareCA := tlsServer(b, bareHandler(body))
	targets := []benchTarget{
		{name: "lease", url: leaseURL, token: "bench-token", caFile: leaseCA, own: true},
		{name: "chain", url: chainURL, token: "bench-token", caFile: chainCA, own: true},
		{name: "bare", url: bareURL, token: "bench-token", caFile: bareCA, own: true},
	}
	if u := os.Getenv(benchURLEnv); u != "" {
		token, err := os.ReadFile(os.Getenv(benchTokenEnv))
		if err != nil {
			b.Fatalf("%s: %v", benchTokenEnv, err)
		}
		targets = append(targets, benchTarget{name: "external", url: strings.TrimSpace(u), token: strings.TrimSpace(string(token)), caFile: os.Getenv(benchCAEnv)})
	}
	for _, conns := range []int{16, 64} {
		for _, target := range targets {
			b.Run(fmt.Sprintf("%s/conns=%d", target.name, conns), func(b *testing.B) {
				cpu0, start := cpuTime(), time.Now()
				if secs := os.Getenv(benchWrkEnv); secs != "" {
					b.ReportMetric(runWrk(b, target, conns, secs), "pairs/s")
					if target.own {
						b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/time.Since(start).Seconds()/1e4, "server-cpu-%")
					}
					return
				}
				spec, err := json.Marshal(httpLoad{URL: target.url, Token: target.token, CAFile: target.caFile, Conns: conns, Pairs: b.N})
				if err != nil {
					b.Fatal(err)
				}
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
				if target.own {
					b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "server-µs/pair")
				}
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
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(spec.CAFile)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("reading the server's CA %s: %v", spec.CAFile, err)
	}
	tr := &http.Transport{MaxIdleConns: spec.Conns, MaxIdleConnsPerHost: spec.Conns, MaxConnsPerHost: spec.Conns,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	do := func(ctx context.Context, method, url, body string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+spec.Token)
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
