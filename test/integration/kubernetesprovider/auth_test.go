package kubernetesprovider

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// A pod created with proxy auth passes Pod Security "restricted" with its
// init container, mounts its own Secret (created before it, deleted with
// it), and its Squid serves the credentials of a lease on that proxy only.
func TestPodsCheckProxyCredentials(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	const ns = "restricted-auth"
	e.restrictedNamespace(t, ns)
	keyring, err := proxyauth.NewKeyring(bytes.Repeat([]byte{3}, proxyauth.MinKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kubernetes.New(e.admin, kubernetes.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	me := proxyauth.ProxyRef{Namespace: ns, Name: "squid-1"}
	uid := uuid.NewUUID()
	req := provider.CreateRequest{Name: provider.NameFromUID(uid), Tag: provider.DefaultTag, OwnerUID: uid, Namespace: ns,
		ProxyAuth: keyring.HelperConfig(me, "", "").Marshal()}
	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("a pod with proxy auth in a restricted namespace: %v", err)
	}
	var secret corev1.Secret
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubernetes.AuthSecretName(req.Name)}, &secret); err != nil {
		t.Fatalf("the pod's proxy auth Secret: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		inst, err := p.Get(ctx, id)
		return err == nil && inst.State == provider.StateRunning, nil
	}); err != nil {
		t.Fatalf("the pod never ran: %v", err)
	}
	inst, ok := e.agent.Instance(ns, req.Name)
	if !ok {
		t.Fatalf("the node agent runs no squid for %s", req.Name)
	}

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("origin")) }))
	defer origin.Close()
	host := net.JoinHostPort(inst.Addr.String(), "3128")
	now := time.Now()
	mine := keyring.LeaseCredentials(me, "lease-1", now, now.Add(time.Minute))
	others := keyring.LeaseCredentials(proxyauth.ProxyRef{Namespace: ns, Name: "squid-2"}, "lease-1", now, now.Add(time.Minute))
	for _, tc := range []struct {
		name string
		user *url.Userinfo
		want int
	}{
		{"no credentials", nil, http.StatusProxyAuthRequired},
		{"another proxy's lease", others.Userinfo(), http.StatusProxyAuthRequired},
		{"this proxy's lease", mine.Userinfo(), http.StatusOK},
		{"the operator's probe", keyring.ProbeCredentials(me).Userinfo(), http.StatusOK},
	} {
		if code, err := nodeagent.StatusThrough(host, tc.user, origin.URL); err != nil || code != tc.want {
			t.Errorf("%s: HTTP %d (%v), want %d", tc.name, code, err, tc.want)
		}
	}

	if err := p.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Get(ctx, client.ObjectKeyFromObject(&secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the proxy auth Secret after Delete: %v, want NotFound", err)
	}
}
