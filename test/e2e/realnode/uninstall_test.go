package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func (c *cluster) uninstallKustomize(t *testing.T) {
	c.uninstall(t, []string{"delete", "-k", c.overlayDir(t), "--ignore-not-found", "--wait=true"})
}

// uninstall runs the README's Removal with the given uninstall command,
// then checks nothing of the operator's is left.
func (c *cluster) uninstall(t *testing.T, uninstall []string) {
	start := time.Now()
	c.must(t, 3*time.Minute, nil, "delete", "proxypools,proxies", "--all", "-A", "--wait")
	if len(uninstall) > 0 && uninstall[0] == "helm" {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := c.run(ctx, nil, filepath.Join(c.root, "bin", "helm"), uninstall[1:]...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	} else {
		c.must(t, 3*time.Minute, nil, uninstall...)
	}
	c.must(t, 2*time.Minute, nil, "delete", "crd", "proxies.crawl.example.com", "proxypools.crawl.example.com", "sitepolicies.crawl.example.com", "--ignore-not-found")
	c.must(t, 4*time.Minute, nil, "delete", "namespace", operatorNS, "--ignore-not-found", "--wait=true")
	t.Logf("removal took %v", time.Since(start).Round(time.Second))
	c.nothingLeft(t)
}

// nothingLeft: no object of the install, the fleet or the operator's own
// making remains.
func (c *cluster) nothingLeft(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var left []string
	add := func(out string, err error) {
		if err != nil {
			left = append(left, err.Error())
			return
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l != "" {
				left = append(left, l)
			}
		}
	}
	add(c.kubectl(ctx, nil, "get", "namespace", operatorNS, "--ignore-not-found", "-o", "name"))
	add(c.kubectl(ctx, nil, "get", "apiservice", apiService, "--ignore-not-found", "-o", "name"))
	add(c.kubectl(ctx, nil, "get", "crd", "-o", "name", "-l", "app.kubernetes.io/part-of=proxy-operator"))
	for _, kind := range []string{"crd", "clusterrole", "clusterrolebinding", "validatingadmissionpolicy", "validatingadmissionpolicybinding"} {
		out, err := c.kubectl(ctx, nil, "get", kind, "-o", "name")
		if err != nil {
			add("", err)
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "proxy-operator") || strings.Contains(l, "crawl.example.com") {
				left = append(left, l)
			}
		}
	}
	// The fleet's pods and their Secrets go with the Proxies, and the
	// pods' NetworkPolicy with the last of them (the garbage collector:
	// within moments).
	add(c.kubectl(ctx, nil, "get", "pods,secrets", "-A", "-o", "name", "-l", "crawl.example.com/managed-by"))
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := c.kubectl(ctx, nil, "get", "networkpolicy", "-n", crawlNS, "-o", "name", "--ignore-not-found")
		return err == nil && !strings.Contains(out, "proxy-operator-squid"), nil
	}); err != nil {
		left = append(left, "networkpolicy "+crawlNS+"/proxy-operator-squid")
	}
	if len(left) > 0 {
		t.Errorf("left after uninstall: %v", left)
	}
}

func (c *cluster) helm(t *testing.T) {
	opName, opTag := splitRef(c.images["operator"])
	sqName, sqTag := splitRef(c.images["squid"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	t.Setenv("HELM_CONFIG_HOME", home)
	t.Setenv("HELM_CACHE_HOME", home)
	t.Setenv("HELM_DATA_HOME", home)
	if out, err := c.run(ctx, nil, filepath.Join(c.root, "bin", "helm"), "install", "proxy-operator", "artifacts/charts/proxy-operator",
		"-n", operatorNS, "--create-namespace",
		// --set-string: a tag of digits only (a commit's short hash can
		// be) would be a number to --set, which the chart's schema refuses.
		"--set", "image.repository="+opName, "--set-string", "image.tag="+opTag,
		"--set", "squidImage.repository="+sqName, "--set-string", "squidImage.tag="+sqTag); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c.waitInstalled(t)
	// One Proxy of the chart's install turns Ready (its Squid pod runs the
	// chart's Squid image).
	proxy := fmt.Sprintf(`apiVersion: crawl.example.com/v1alpha1
kind: Proxy
metadata: {name: helm-proxy}
spec:
  provider: kubernetes
  healthCheck: {url: %q, intervalSeconds: 5}
`, c.siteURL())
	c.must(t, time.Minute, []byte(proxy), "-n", crawlNS, "apply", "-f", "-")
	c.must(t, 3*time.Minute, nil, "-n", crawlNS, "wait", "proxy/helm-proxy", "--for=condition=Ready", "--timeout=3m")
	c.uninstall(t, []string{"helm", "uninstall", "proxy-operator", "-n", operatorNS, "--wait"})
}
