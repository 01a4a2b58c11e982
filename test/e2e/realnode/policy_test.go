package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/proxy-operator/proxy-operator/pkg/metrics"
	"github.com/proxy-operator/proxy-operator/pkg/serving"
)

func (c *cluster) networkPolicy(t *testing.T) {
	if c.leaseURL == "" {
		t.Fatal("no lease from the step before")
	}
	c.must(t, time.Minute, nil, "apply", "-n", crawlNS, "-k", "artifacts/proxies")
	// The policy agent programs the node within moments; a fetch of the
	// private origin fails (the proxy's own rules refuse it already), the
	// site's still works. Where no agent can run (make cluster says why),
	// the policy itself is not what refuses.
	agent, err := os.ReadFile(filepath.Join(c.dir, "networkpolicy"))
	if err != nil {
		t.Fatal(err)
	}
	if a := strings.TrimSpace(string(agent)); a != "kube-network-policies" {
		t.Logf("no NetworkPolicy agent on this node (%s): the proxies' own rules refuse the private origin, and the policy is checked to leave the site and the probes working", a)
	}
	script := `echo "site: $(curl -sS --max-time 20 -x "$LEASE_URL" "$SITE")"
echo "web: $(curl -s --max-time 10 -o /dev/null -w '%{http_code}' -x "$LEASE_URL" "$WEB")"`
	var got map[string]string
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	attempt := 0
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		attempt++
		res := c.runToolbox(t, crawlNS, fmt.Sprintf("fetch-policy-%d", attempt), "crawler",
			map[string]string{"LEASE_URL": c.leaseURL, "SITE": c.siteURL(), "WEB": webURL}, script)
		got = lines(res.logs)
		return got["site"] == siteMarker && got["web"] != "200", nil
	})
	if err != nil {
		t.Fatalf("under artifacts/proxies: site %q (want %q), in-cluster origin status %q (want refused, not 200)", got["site"], siteMarker, got["web"])
	}
	// Probes go on passing: the leader's probe count grows, no proxy's
	// failure count does, and every Proxy stays healthy.
	before := c.probeCounts(t)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	var why string
	err = wait.PollUntilContextCancel(ctx2, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		now := c.probeCounts(t)
		if now.pod != before.pod {
			return false, fmt.Errorf("the leader changed (%s, then %s)", before.pod, now.pod)
		}
		for proxy, n := range now.failures {
			if n > before.failures[proxy] {
				return false, fmt.Errorf("probes through %s failed under the policy: %v failures, %v before", proxy, n, before.failures[proxy])
			}
		}
		proxies, err := c.proxies(ctx)
		if err != nil {
			why = err.Error()
			return false, nil
		}
		for _, p := range proxies {
			if !p.IsHealthy() {
				return false, fmt.Errorf("%s unhealthy under the policy: %v", p.Name, p.Status.Conditions)
			}
		}
		why = fmt.Sprintf("%v probes since the policy", now.probes-before.probes)
		return now.probes-before.probes >= 4, nil
	})
	if err != nil {
		t.Fatalf("probes under the policy: %v (%s)", err, why)
	}
}

// probes is what the leader's metrics say of its probes.
type probes struct {
	pod      string
	probes   float64
	failures map[string]float64
}

// probeCounts reads the leader's /metrics through kube-apiserver's pod
// proxy.
func (c *cluster) probeCounts(t *testing.T) probes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := c.kube.CoreV1().Pods(operatorNS).List(ctx, metav1.ListOptions{LabelSelector: serving.LabelKey + "=true"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the serving replica: %v (%d pods)", err, len(pods.Items))
	}
	pod := pods.Items[0].Name
	raw, err := c.kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", operatorNS, "pods", pod+":8080", "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("metrics of %s: %v", pod, err)
	}
	p := probes{pod: pod, failures: map[string]float64{}}
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			continue
		}
		switch {
		case name == metrics.HealthcheckDurationName+"_count":
			p.probes = v
		case strings.HasPrefix(name, metrics.HealthcheckFailuresName+"{"):
			p.failures[name] = v
		}
	}
	return p
}
