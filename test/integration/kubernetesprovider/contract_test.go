package kubernetesprovider

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
	"github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/provider/providertest"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

const (
	namespace = "providertest"
	nodeName  = "kubernetesprovider-node"
)

// env is the package's control plane and its running node agent, which
// every test shares: the tests keep apart by owner UID and tag, and those
// that need a namespace of their own name it.
type env struct {
	cp    *controlplane.ControlPlane
	admin client.Client
	agent *nodeagent.Agent
}

// suite starts the namespace and the node agent once, on the shared control
// plane, for the first test that asks; the package's framework.Env stops
// them after the tests.
type suite struct {
	cp   *controlplane.Shared
	fw   *framework.Env
	once sync.Once
	env  *env
	err  error
}

var shared = &suite{cp: controlplane.NewShared(controlplane.Options{})}

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, "kubernetesprovider", func(_ context.Context, e *framework.Env) error {
		e.Share(shared.cp)
		shared.fw = e
		return nil
	}))
}

func setup(t *testing.T) *env {
	t.Helper()
	if _, err := nodeagent.LookSquid(""); err != nil {
		t.Fatalf("%v (this test runs real squid)", err)
	}
	cp := shared.cp.Get(t)
	shared.once.Do(func() { shared.env, shared.err = shared.start(cp) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env
}

func (s *suite) start(cp *controlplane.ControlPlane) (*env, error) {
	ctx := context.Background()
	admin, err := client.New(cp.RESTConfig(), client.Options{})
	if err != nil {
		return nil, err
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return nil, err
	}
	agentLog, err := s.fw.Logger("nodeagent.log")
	if err != nil {
		return nil, err
	}
	agent, err := nodeagent.New(cp.RESTConfig(), nodeagent.Options{
		NodeName: nodeName,
		// The suite tags every case differently.
		AnyTag: true,
		Log:    agentLog,
		// Disjoint from the other test packages' agents.
		PoolFirst: netip.MustParseAddr("127.0.5.2"),
		PoolLast:  netip.MustParseAddr("127.0.5.250"),
	})
	if err != nil {
		return nil, err
	}
	if err := s.fw.Go(ctx, "node agent", agent.Run, agent.Ready()); err != nil {
		return nil, err
	}
	return &env{cp: cp, admin: admin, agent: agent}, nil
}

func TestContract(t *testing.T) {
	e := setup(t)
	providertest.Run(t, providertest.Harness{
		New: func(t providertest.T) provider.Provider {
			c, err := client.New(e.cp.RESTConfig(), client.Options{})
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			p, err := kubernetes.New(c, kubernetes.Options{NodeName: nodeName})
			if err != nil {
				t.Fatalf("kubernetes.New: %v", err)
			}
			return p
		},
		Template: provider.CreateRequest{
			Namespace: namespace,
			CloudInit: "#cloud-config\n",
			Proxy:     &crawlv1alpha1.ProxySpec{Provider: kubernetes.Name},
		},
		MissingID: func(name string) string { return kubernetes.ProviderID(namespace, name) },
		Timeout:   60 * time.Second,
	})
}

// TestPermissionDeniedIsPermanent: a 403 from RBAC (the real apiserver, an
// identity with no pod rights) is ErrPermanent on every call that writes or
// reads, as the provider contract (pkg/provider/errors.go) requires.
func TestPermissionDeniedIsPermanent(t *testing.T) {
	e := setup(t)
	cfg, err := e.cp.ClientConfigFor("nobody")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := kubernetes.New(c, kubernetes.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	uid := uuid.NewUUID()
	req := provider.CreateRequest{Name: provider.NameFromUID(uid), Tag: provider.DefaultTag, OwnerUID: uid, Namespace: namespace}
	if id, err := p.Create(ctx, req); !provider.IsPermanent(err) {
		t.Errorf("Create without RBAC = (%q, %v), want ErrPermanent", id, err)
	}
	id := kubernetes.ProviderID(namespace, req.Name)
	if inst, err := p.Get(ctx, id); !provider.IsPermanent(err) {
		t.Errorf("Get without RBAC = (%+v, %v), want ErrPermanent", inst, err)
	}
	if err := p.Delete(ctx, id); !provider.IsPermanent(err) {
		t.Errorf("Delete without RBAC = %v, want ErrPermanent", err)
	}
	if insts, err := p.ListByTag(ctx, provider.DefaultTag); !provider.IsPermanent(err) {
		t.Errorf("ListByTag without RBAC = (%v, %v), want ErrPermanent", insts, err)
	}
	// Negative control: the admin's provider is allowed, so the 403s above
	// came from RBAC and not from a broken request.
	admin, err := kubernetes.New(e.admin, kubernetes.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(ctx, req); err != nil {
		t.Fatalf("admin Create: %v", err)
	}
	if err := admin.Delete(ctx, id); err != nil {
		t.Fatalf("admin Delete: %v", err)
	}
}

// TestInvalidPodIsPermanent: a pod the apiserver rejects (422) is ErrPermanent.
func TestInvalidPodIsPermanent(t *testing.T) {
	e := setup(t)
	p, err := kubernetes.New(e.admin, kubernetes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	uid := uuid.NewUUID()
	req := provider.CreateRequest{
		Name: provider.NameFromUID(uid), Tag: "not a valid label value!", OwnerUID: uid, Namespace: namespace,
	}
	_, err = p.Create(t.Context(), req)
	if !provider.IsPermanent(err) || !isInvalid(err) {
		t.Errorf("Create of a pod with an invalid label = %v, want ErrPermanent wrapping a 422", err)
	}
}

func isInvalid(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se) && se.Status().Code == 422
}

// TestDeletedPodTerminatesThenVanishes: Get reports Terminated while the node
// agent stops squid, then NotFound once it confirmed the deletion.
func TestDeletedPodTerminatesThenVanishes(t *testing.T) {
	e := setup(t)
	p, err := kubernetes.New(e.admin, kubernetes.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	uid := uuid.NewUUID()
	req := provider.CreateRequest{Name: provider.NameFromUID(uid), Tag: provider.DefaultTag, OwnerUID: uid, Namespace: namespace}
	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var running *provider.Instance
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		inst, err := p.Get(ctx, id)
		if err != nil {
			return false, err
		}
		running = inst
		return inst.State == provider.StateRunning, nil
	}); err != nil {
		t.Fatalf("waiting for Running: %v", err)
	}
	if _, err := netip.ParseAddr(running.IP); err != nil {
		t.Errorf("Running instance IP %q: %v", running.IP, err)
	}
	if err := p.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Squid takes about two seconds to stop, so the first Get lands in the
	// graceful-deletion window.
	inst, err := p.Get(ctx, id)
	if err != nil || inst.State != provider.StateTerminated {
		t.Errorf("Get right after Delete = (%+v, %v), want Terminated", inst, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := p.Get(ctx, id)
		return provider.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("waiting for NotFound: %v", err)
	}
}
