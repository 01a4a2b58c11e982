package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned"
	typedleasing "github.com/proxy-operator/proxy-operator/pkg/generated/clientset/versioned/typed/leasing/v1alpha1"
)

type config struct {
	target   string
	selector map[string]string
	ttl      time.Duration
	wait     time.Duration
	timeout  time.Duration
}

func main() {
	var cfg config
	var kubeconfig, namespace, selector string
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
	flag.StringVar(&namespace, "namespace", "", "namespace to lease in (default: the pod's, or the kubeconfig context's)")
	flag.StringVar(&cfg.target, "url", "", "URL to fetch through a leased proxy (required)")
	flag.StringVar(&selector, "selector", "", "proxy attributes to match, k=v[,k=v]")
	flag.DurationVar(&cfg.ttl, "ttl", time.Minute, "lease TTL (renewed at half of it while fetching)")
	flag.DurationVar(&cfg.wait, "wait", 0, "wait this long for a free proxy (0: fail at once)")
	flag.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "fetch timeout")
	flag.Parse()
	sel, err := parseSelector(selector)
	if err != nil || cfg.target == "" {
		flag.Usage()
		os.Exit(2)
	}
	cfg.selector = sel

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	restConfig, err := loader.ClientConfig() // falls back to the in-cluster config in a pod
	if err != nil {
		log.Fatalf("loading the client config: %v", err)
	}
	if namespace == "" {
		if namespace, _, err = loader.Namespace(); err != nil {
			log.Fatalf("finding the namespace: %v", err)
		}
	}
	clientset, err := versioned.NewForConfig(restConfig)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, clientset.LeasingV1alpha1().ProxyLeases(namespace), cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("selector pair %q is not k=v", pair)
		}
		out[k] = v
	}
	return out, nil
}

// resultFor maps the target's answer to a report result.
func resultFor(status int) leasingv1alpha1.ReportResult {
	switch status {
	case http.StatusTooManyRequests:
		return leasingv1alpha1.ResultRateLimited
	case http.StatusForbidden:
		return leasingv1alpha1.ResultBanned
	}
	return leasingv1alpha1.ResultOK
}

func run(ctx context.Context, leases typedleasing.ProxyLeaseInterface, cfg config, out io.Writer) error {
	target, err := url.Parse(cfg.target)
	if err != nil || target.Host == "" {
		return fmt.Errorf("bad -url %q", cfg.target)
	}
	ttl := int32(cfg.ttl / time.Second)
	pl, err := leases.Create(ctx, &leasingv1alpha1.ProxyLease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "crawler-"},
		Spec: leasingv1alpha1.ProxyLeaseSpec{
			Selector:    cfg.selector,
			Target:      target.Hostname(), // cooldowns are per (proxy, site)
			TTLSeconds:  &ttl,
			WaitSeconds: int32(cfg.wait / time.Second),
		},
	}, metav1.CreateOptions{})
	switch {
	case apierrors.IsConflict(err):
		// No proxy free: the message says why (considered, at capacity, in
		// cooldown, unhealthy); retry later or ask with -wait.
		return fmt.Errorf("no proxy free: %w", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("this identity may not lease here (bind proxy-operator:crawler in the namespace): %w", err)
	case err != nil:
		return fmt.Errorf("leasing a proxy: %w", err)
	}
	// Always give the proxy back, even when the fetch fails or ctx ends.
	defer func() {
		err := leases.Delete(context.WithoutCancel(ctx), pl.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			log.Printf("deleting lease %s: %v", pl.Name, err)
		}
	}()
	proxy := pl.Status.Proxy
	if proxy == nil {
		return fmt.Errorf("lease %s came back without a proxy", pl.Name)
	}
	// The URL carries the lease's proxy credentials: never print them.
	fmt.Fprintf(out, "leased %s (%s) as %s until %s\n", proxy.Name, redacted(proxy.URL), pl.Name, pl.Status.ExpireTime.Format(time.RFC3339))

	// Keep the lease while the fetch runs: renewing is a patch of
	// spec.ttlSeconds (any update renews for that many seconds from now).
	fetchCtx, stopRenewing := context.WithCancel(ctx)
	defer stopRenewing()
	go keepRenewing(fetchCtx, leases, pl.Name, ttl, cfg.ttl/2)

	status, n, err := fetch(fetchCtx, proxy.URL, cfg.target, cfg.timeout)
	if err != nil {
		return err
	}
	result := resultFor(status)
	fmt.Fprintf(out, "fetched %s: HTTP %d, %d bytes; reporting %s\n", cfg.target, status, n, result)
	st, err := leases.Report(ctx, pl.Name, &leasingv1alpha1.ProxyLeaseReport{Result: result}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("reporting: %w", err)
	}
	fmt.Fprintln(out, st.Message)
	return nil
}

func keepRenewing(ctx context.Context, leases typedleasing.ProxyLeaseInterface, name string, ttl int32, every time.Duration) {
	if every <= 0 {
		return
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"ttlSeconds":%d}}`, ttl))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := leases.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !errors.Is(err, context.Canceled) {
				log.Printf("renewing lease %s: %v", name, err)
			}
		}
	}
}

// fetch GETs target through proxyURL and returns the status code and body size.
func fetch(ctx context.Context, proxyURL, target string, timeout time.Duration) (int, int64, error) {
	pu, err := url.Parse(proxyURL)
	if err != nil {
		return 0, 0, fmt.Errorf("lease returned an unparsable proxy URL: %w", err)
	}
	// A fresh transport per lease: connections must go through this proxy only.
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("fetching %s through %s: %w", target, pu.Redacted(), err)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, n, nil
}

// redacted is a proxy URL without its password, for output.
func redacted(proxyURL string) string {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
