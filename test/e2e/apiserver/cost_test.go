package apiservere2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/proxy-operator/proxy-operator/test/cputime"
)

// The cost benchmark runs its clients in a child process (this test binary,
// re-executed), so that this process's CPU time is the server side alone: the
// aggregated server and the lease store, as the operator runs them.
const loadSpecEnv = "PROXY_OPERATOR_LOADGEN_SPEC"

// loadSpec is what the child process runs: pairs create+delete pairs of Kind
// on Workers goroutines, as the identity of the credentials.
type loadSpec struct {
	Host      string
	CAData    []byte
	CertData  []byte `json:",omitempty"`
	KeyData   []byte `json:",omitempty"`
	Token     string `json:",omitempty"`
	Kind      string // "ProxyLease" or "ConfigMap"
	Namespace string
	Pairs     int
	Workers   int
}

func specFor(cfg *rest.Config, kind, ns string, pairs int) loadSpec {
	return loadSpec{
		Host: cfg.Host, CAData: cfg.CAData, CertData: cfg.CertData, KeyData: cfg.KeyData, Token: cfg.BearerToken,
		Kind: kind, Namespace: ns, Pairs: pairs, Workers: benchWorkers,
	}
}

// runLoadChild runs spec in a child process and returns its pairs/s and the
// CPU time the child used.
func runLoadChild(b *testing.B, spec loadSpec) (float64, time.Duration) {
	b.Helper()
	data, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), loadSpecEnv+"="+string(data))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("load generator: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "PAIRS/S "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				b.Fatal(err)
			}
			return v, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
	}
	b.Fatalf("load generator printed no result:\n%s", out)
	return 0, 0
}

// loadGeneratorMain is the child process: it runs the spec in the
// environment and prints "PAIRS/S <rate>".
func loadGeneratorMain(specJSON string) int {
	var spec loadSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := &rest.Config{
		Host:            spec.Host,
		BearerToken:     spec.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: spec.CAData, CertData: spec.CertData, KeyData: spec.KeyData},
		QPS:             -1,
	}
	pair := pairFor(cfg, spec.Kind, spec.Namespace)
	if pair == nil {
		fmt.Fprintf(os.Stderr, "unknown kind %q\n", spec.Kind)
		return 2
	}
	rate, err := pairsPerSecond(spec.Pairs, spec.Workers, pair)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("PAIRS/S %f\n", rate)
	return 0
}

// BenchmarkCostPerPair measures, side by side in one run, ProxyLease and
// ConfigMap create+delete pairs through the same kube-apiserver as a
// ServiceAccount with a Role (an in-cluster crawler) and as the admin
// (system:masters), with 16 client workers in a child process. Per pair it
// reports the CPU of the operator side (this process: the aggregated server
// and the lease store), of kube-apiserver, of etcd and of the clients (all
// four share the machine's cores; the clients' figure includes their
// process's start). b.N is the pairs per path. Run:
//
//	go test ./test/e2e/apiserver -run '^$' -bench CostPerPair -benchtime 4000x -count 3
func BenchmarkCostPerPair(b *testing.B) {
	ns := namespace(b, "cost")
	for i := 0; i < 2*benchWorkers; i++ {
		addProxy(b, ns, fmt.Sprintf("px-%02d", i), nil)
	}
	sa := serviceAccount(b, ns, "crawler", crawlerRole(ns))
	pids := shared.cp.PIDs()
	for _, who := range []struct {
		name string
		cfg  *rest.Config
	}{{"serviceaccount", sa}, {"admin", shared.admin}} {
		for _, kind := range []string{"ProxyLease", "ConfigMap"} {
			b.Run(kind+"/"+who.name, func(b *testing.B) {
				spec := specFor(who.cfg, kind, ns, b.N)
				self, kube, etcd := cputime.Self(b), cputime.Process(b, pids["kube-apiserver"]), cputime.Process(b, pids["etcd"])
				rate, client := runLoadChild(b, spec)
				perPair := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
				b.ReportMetric(rate, "pairs/s")
				b.ReportMetric(perPair(cputime.Self(b)-self), "operator-µs/pair")
				b.ReportMetric(perPair(cputime.Process(b, pids["kube-apiserver"])-kube), "apiserver-µs/pair")
				b.ReportMetric(perPair(cputime.Process(b, pids["etcd"])-etcd), "etcd-µs/pair")
				b.ReportMetric(perPair(client), "client-µs/pair")
			})
		}
	}
}

// interleavedRounds is how many times BenchmarkProxyLeaseToConfigMap
// alternates the two kinds.
const interleavedRounds = 6

// BenchmarkProxyLeaseToConfigMap measures the ratio the ProxyLease API is
// held to — ProxyLease create+delete pairs per second over ConfigMap
// create+delete pairs per second through the same kube-apiserver, as a
// ServiceAccount with a Role — with the two kinds alternating in rounds (the
// first of each round alternating too), so that a change of the machine's
// state during the run (on two cores the ConfigMap baseline moves by a third
// between minutes) weighs on both sides alike. It reports the median rate of
// each kind, their ratio, and the operator's CPU per ProxyLease pair. b.N is
// the pairs per kind. Run:
//
//	go test ./test/e2e/apiserver -run '^$' -bench ProxyLeaseToConfigMap -benchtime 9000x -count 3
func BenchmarkProxyLeaseToConfigMap(b *testing.B) {
	ns := namespace(b, "ratio")
	for i := 0; i < 2*benchWorkers; i++ {
		addProxy(b, ns, fmt.Sprintf("px-%02d", i), nil)
	}
	sa := serviceAccount(b, ns, "crawler", crawlerRole(ns))
	per := max(b.N/interleavedRounds, benchWorkers)
	rates := map[string][]float64{}
	var operator time.Duration
	for round := range interleavedRounds {
		kinds := []string{"ProxyLease", "ConfigMap"}
		if round%2 == 1 {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		for _, kind := range kinds {
			self := cputime.Self(b)
			rate, _ := runLoadChild(b, specFor(sa, kind, ns, per))
			if kind == "ProxyLease" {
				operator += cputime.Self(b) - self
			}
			rates[kind] = append(rates[kind], rate)
		}
	}
	lease, configMap := median(rates["ProxyLease"]), median(rates["ConfigMap"])
	b.ReportMetric(lease, "proxylease-pairs/s")
	b.ReportMetric(configMap, "configmap-pairs/s")
	b.ReportMetric(lease/configMap, "ratio")
	b.ReportMetric(float64(operator.Microseconds())/float64(per*interleavedRounds), "operator-µs/pair")
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
