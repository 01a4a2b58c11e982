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

	"github.com/proxy-operator/proxy-operator/pkg/discovery/client"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

type config struct {
	discoveryURL string
	token        string
	caFile       string
	target       string
	selector     map[string]string
	namespace    string
	ttl          time.Duration
	wait         time.Duration
	timeout      time.Duration
}

func main() {
	var cfg config
	var selector string
	// The variables of the Python client and the Scrapy middleware; the
	// DISCOVERY_* names this example used first still work.
	flag.StringVar(&cfg.discoveryURL, "discovery-url", envOr("https://localhost:8090", "PROXY_OPERATOR_URL", "DISCOVERY_URL"), "discovery API base URL (default $PROXY_OPERATOR_URL)")
	flag.StringVar(&cfg.caFile, "ca-file", envOr("", "PROXY_OPERATOR_CA_FILE", "DISCOVERY_CA_FILE"), "CA bundle verifying an https:// discovery API (default $PROXY_OPERATOR_CA_FILE, else the system's roots)")
	flag.StringVar(&cfg.token, "token", envOr("", "PROXY_OPERATOR_TOKEN", "DISCOVERY_TOKEN"), "bearer token (default $PROXY_OPERATOR_TOKEN)")
	flag.StringVar(&cfg.target, "url", "", "URL to fetch through a leased proxy (required)")
	flag.StringVar(&selector, "selector", "", "proxy attributes to match, k=v[,k=v]")
	flag.StringVar(&cfg.namespace, "namespace", "", "only Proxies of this namespace")
	flag.DurationVar(&cfg.ttl, "ttl", time.Minute, "lease TTL")
	flag.DurationVar(&cfg.wait, "wait", 0, "wait this long for a free proxy (0: fail at once)")
	flag.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "fetch timeout")
	flag.Parse()
	sel, err := parseSelector(selector)
	if err != nil || cfg.target == "" {
		flag.Usage()
		os.Exit(2)
	}
	cfg.selector = sel
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// envOr is the first of the variables keys that is set, else def.
func envOr(def string, keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return def
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
func resultFor(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return wire.ResultRateLimited
	case http.StatusForbidden:
		return wire.ResultBanned
	}
	return wire.ResultOK
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	target, err := url.Parse(cfg.target)
	if err != nil || target.Host == "" {
		return fmt.Errorf("bad -url %q", cfg.target)
	}
	var opts []client.Option
	if cfg.caFile != "" {
		roots, err := client.LoadCAFile(cfg.caFile)
		if err != nil {
			return err
		}
		opts = append(opts, client.WithRootCAs(roots))
	}
	c, err := client.New(cfg.discoveryURL, cfg.token, opts...)
	if err != nil {
		return err
	}
	l, err := c.Acquire(ctx, wire.AcquireRequest{
		Selector:    cfg.selector,
		Namespace:   cfg.namespace,
		Target:      target.Hostname(), // cooldowns are per (proxy, site)
		TTLSeconds:  int64(cfg.ttl / time.Second),
		WaitSeconds: int64(cfg.wait / time.Second),
	})
	var apiErr *client.APIError
	switch {
	case client.IsNoMatch(err) && errors.As(err, &apiErr):
		n := apiErr.NoMatch
		return fmt.Errorf("no proxy free: considered %d, at capacity %d, in cooldown %d, unhealthy %d, free %d, queued ahead %d",
			n.Considered, n.AtCapacity, n.InCooldown, n.Unhealthy, n.Free, n.QueuedAhead)
	case err != nil:
		return fmt.Errorf("leasing a proxy: %w", err)
	}
	// Always give the proxy back, even when the fetch fails.
	defer func() {
		if err := c.Release(context.WithoutCancel(ctx), l.LeaseID); err != nil {
			log.Printf("releasing lease %s: %v", l.LeaseID, err)
		}
	}()
	// The URL carries the lease's proxy credentials: print it redacted.
	proxyURL, err := url.Parse(l.Proxy.URL)
	if err != nil {
		return fmt.Errorf("lease of %s/%s returned an unparsable proxy URL: %w", l.Proxy.Namespace, l.Proxy.Name, err)
	}
	fmt.Fprintf(out, "leased %s/%s (%s) until %s\n", l.Proxy.Namespace, l.Proxy.Name, proxyURL.Redacted(), l.ExpiresAt.Format(time.RFC3339))
	// A fresh transport per lease: connections must go through this proxy only.
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}
	hc := &http.Client{Transport: tr, Timeout: cfg.timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.target, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s through %s: %w", cfg.target, proxyURL.Redacted(), err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	result := resultFor(resp.StatusCode)
	fmt.Fprintf(out, "fetched %s: HTTP %d, %d bytes; reporting %s\n", cfg.target, resp.StatusCode, n, result)
	if err := c.Report(ctx, l.LeaseID, result, ""); err != nil {
		return fmt.Errorf("reporting: %w", err)
	}
	return nil
}
