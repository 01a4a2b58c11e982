package kubernetesprovider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
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
// it), and its Squid serves the credentials of a lease on that proxy only,
// and only to where the provider's Egress allows: by default none of the
// test's loopback origins (internal addresses, any port but 80 and 443), nor
// Squid's cache manager, nor CONNECT to another port than 443; with
// loopback and every port allowed, the origin, and still not the cache
// manager.
func TestPodsCheckProxyCredentials(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	const ns = "restricted-auth"
	e.restrictedNamespace(t, ns)
	keyring, err := proxyauth.NewKeyring(bytes.Repeat([]byte{3}, proxyauth.MinKeySize), nil)
	if err != nil {
		t.Fatal(err)
	}
	origin := serveOn(t, "127.0.0.1")
	opened, err := proxyauth.ParseEgress([]string{"127.0.0.0/8"}, nil, []string{"1-65535"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		name   string
		egress proxyauth.Egress
		// want: the status of each request through the proxy.
		want []request
	}{
		{"default egress", proxyauth.Egress{}, []request{
			{"no credentials", noUser, origin, http.StatusProxyAuthRequired},
			{"another proxy's lease", othersLease, origin, http.StatusProxyAuthRequired},
			{"this proxy's lease to a loopback origin", myLease, origin, http.StatusForbidden},
			{"the operator's probe to a loopback origin", probe, origin, http.StatusForbidden},
			{"this proxy's lease to the cache manager", myLease, cacheManager, http.StatusForbidden},
		}},
		{"loopback and every port allowed", opened, []request{
			{"no credentials", noUser, origin, http.StatusProxyAuthRequired},
			{"another proxy's lease", othersLease, origin, http.StatusProxyAuthRequired},
			{"this proxy's lease", myLease, origin, http.StatusOK},
			{"the operator's probe", probe, origin, http.StatusOK},
			{"this proxy's lease to the cache manager", myLease, cacheManager, http.StatusForbidden},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := kubernetes.New(e.admin, kubernetes.Options{NodeName: nodeName, Egress: tc.egress})
			if err != nil {
				t.Fatal(err)
			}
			uid := uuid.NewUUID()
			name := provider.NameFromUID(uid)
			me := proxyauth.ProxyRef{Namespace: ns, Name: name}
			// The helper's configuration carries the egress its relay
			// enforces, as the operator's (proxyauth.Instances) does.
			hc := keyring.HelperConfig(me, "", "")
			hc.Egress = tc.egress
			req := provider.CreateRequest{Name: name, Tag: provider.DefaultTag, OwnerUID: uid, Namespace: ns, ProxyAuth: hc.Marshal()}
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
			host := net.JoinHostPort(inst.Addr.String(), "3128")
			users := map[string]*url.Userinfo{
				noUser:      nil,
				myLease:     keyring.LeaseCredentials(me, "lease-1", now, now.Add(time.Minute)).Userinfo(),
				othersLease: keyring.LeaseCredentials(proxyauth.ProxyRef{Namespace: ns, Name: "squid-2"}, "lease-1", now, now.Add(time.Minute)).Userinfo(),
				probe:       keyring.ProbeCredentials(me).Userinfo(),
			}
			for _, r := range tc.want {
				if r.target == cacheManager {
					r.target = "http://" + host + "/squid-internal-mgr/info"
				}
				if code, err := nodeagent.StatusThrough(host, users[r.user], r.target); err != nil || code != r.status {
					t.Errorf("%s: HTTP %d (%v), want %d", r.name, code, err, r.status)
				}
			}
			if tc.egress.AllowedPorts == nil {
				// CONNECT to 8443: not a port a lease may tunnel to.
				if code := connectStatus(t, host, users[myLease], "example.com:8443"); code != http.StatusForbidden {
					t.Errorf("CONNECT example.com:8443 with this proxy's lease: HTTP %d, want 403", code)
				}
			}
			if err := p.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := e.admin.Get(ctx, client.ObjectKeyFromObject(&secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("the proxy auth Secret after Delete: %v, want NotFound", err)
			}
		})
	}
}

// The users of requests.
const (
	noUser      = "none"
	myLease     = "this proxy's lease"
	othersLease = "another proxy's lease"
	probe       = "the operator's probe"
)

// cacheManager stands for the proxy's own cache manager URL.
const cacheManager = "cache manager"

// request is one request through a proxy and the status it must get.
type request struct {
	name, user, target string
	status             int
}

// serveOn starts an origin on addr (a free port) and returns its URL.
func serveOn(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("origin")) }))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s.URL
}

// connectStatus sends CONNECT authority to the proxy at host and returns
// the status it answers.
func connectStatus(t *testing.T, host string, user *url.Userinfo, authority string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: authority}, Host: authority, Header: http.Header{}}
	if user != nil {
		pw, _ := user.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user.Username()+":"+pw)))
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
