package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	k8sprovider "github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// AuthHelperName is the helper binary's name (cmd/proxy-auth-helper).
const AuthHelperName = "proxy-auth-helper"

// LookAuthHelper finds the proxy auth helper: path if given, else
// proxy-auth-helper on $PATH, else bin/proxy-auth-helper of the module the
// working directory is in (a test's is), built with `go build` if missing.
func LookAuthHelper(path string) (string, error) {
	if path != "" {
		return exec.LookPath(path)
	}
	if p, err := exec.LookPath(AuthHelperName); err == nil {
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("finding %s: not on $PATH, and %w", AuthHelperName, err)
	}
	bin := filepath.Join(root, "bin", AuthHelperName)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Built beside, then renamed: test binaries of several packages may
	// build it at once.
	tmp := bin + ".tmp" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, "./cmd/proxy-auth-helper")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", AuthHelperName, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("installing %s: %w", bin, err)
	}
	return bin, nil
}

// moduleRoot is the nearest directory at or above the working directory
// with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the working directory is in no Go module")
		}
		dir = parent
	}
}

// InstallAuthHelper copies the helper at src into dir (0755), where squid's
// user can run it whatever the permissions above src, and returns its path.
func InstallAuthHelper(src, dir string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("reading the auth helper: %w", err)
	}
	dst := filepath.Join(dir, AuthHelperName)
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return "", fmt.Errorf("installing the auth helper: %w", err)
	}
	return dst, nil
}

// authConfig does what a kubelet does for the kubernetes provider's proxy
// auth Secret volume (mounted at k8sprovider.AuthDir): it returns the
// helper configuration the Secret holds and the access rules of its
// squid.conf, or nil when the pod mounts none.
func (a *Agent) authConfig(ctx context.Context, pod *corev1.Pod) ([]byte, string, error) {
	c := proxyContainer(pod)
	if c == nil {
		return nil, "", nil
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != k8sprovider.AuthDir {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			s, err := a.client.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, "", fmt.Errorf("reading the proxy auth Secret %s: %w", v.Secret.SecretName, err)
			}
			data, ok := s.Data[k8sprovider.AuthConfigFile]
			if !ok || len(data) == 0 {
				return nil, "", fmt.Errorf("the proxy auth Secret %s has no key %q", v.Secret.SecretName, k8sprovider.AuthConfigFile)
			}
			return data, proxyauth.SquidAccessRules(string(s.Data[k8sprovider.AuthSquidConfFile])), nil
		}
	}
	return nil, "", nil
}

// StatusThrough GETs target through the proxy at proxyAddr ("ip:port") with
// user as its credentials (nil: none) on a fresh connection, and returns
// the HTTP status: what a proxy that checks credentials answers them.
func StatusThrough(proxyAddr string, user *url.Userinfo, target string) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr, User: user}), DisableKeepAlives: true}}
	resp, err := c.Get(target)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
