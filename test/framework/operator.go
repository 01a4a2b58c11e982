package framework

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/artifacts/crds"
	"github.com/proxy-operator/proxy-operator/artifacts/rbac"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

// OperatorUser is the identity tests run the operator as. Binding it to the
// generated ClusterRole only (never system:masters) makes a missing RBAC
// marker fail the tests instead of the first real deployment.
const OperatorUser = "proxy-operator"

// OperatorSuite is a running control plane with the operator's ClusterRole
// installed.
type OperatorSuite struct {
	CP *controlplane.ControlPlane
	// Admin is the cluster-admin config; Operator authenticates as
	// OperatorUser.
	Admin, Operator *rest.Config
	Scheme          *runtime.Scheme
	// ClusterRole is the name of the installed operator ClusterRole.
	ClusterRole string
}

// OperatorSuite starts the package's control plane with the CRDs and
// installs the operator ClusterRole; the control plane stops after the
// package's tests.
func (e *Env) OperatorSuite(ctx context.Context, scheme *runtime.Scheme) (*OperatorSuite, error) {
	cp, err := e.ControlPlane(ctx, controlplane.Options{CRDFS: crds.FS})
	if err != nil {
		return nil, err
	}
	s := &OperatorSuite{CP: cp, Admin: cp.RESTConfig(), Scheme: scheme}
	if err := s.init(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *OperatorSuite) init(ctx context.Context) error {
	c, err := client.New(s.Admin, client.Options{Scheme: s.Scheme})
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	if s.ClusterRole, err = InstallClusterRole(ctx, c); err != nil {
		return err
	}
	if s.Operator, err = s.CP.ClientConfigFor(OperatorUser); err != nil {
		return fmt.Errorf("issuing the operator's client certificate: %w", err)
	}
	return nil
}

// Namespace creates a namespace named after prefix in which OperatorUser
// holds the operator ClusterRole, and returns an uncached admin client.
func (s *OperatorSuite) Namespace(t testing.TB, prefix string) (client.WithWatch, string) {
	t.Helper()
	ctx := context.Background()
	c, err := client.NewWithWatch(s.Admin, client.Options{Scheme: s.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "proxy-operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.ClusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: OperatorUser}},
	}
	if err := c.Create(ctx, rb); err != nil {
		t.Fatalf("binding the operator role: %v", err)
	}
	return c, ns.Name
}

// InstallClusterRole creates the ClusterRole of artifacts/rbac/role.yaml and
// returns its name.
func InstallClusterRole(ctx context.Context, c client.Client) (string, error) {
	data, err := rbac.FS.ReadFile("role.yaml")
	if err != nil {
		return "", fmt.Errorf("reading role.yaml: %w", err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var cr rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &cr); err != nil {
			return "", fmt.Errorf("decoding role.yaml: %w", err)
		}
		if cr.Kind != "ClusterRole" {
			continue
		}
		if err := c.Create(ctx, &cr); err != nil {
			return "", fmt.Errorf("creating ClusterRole: %w", err)
		}
		return cr.Name, nil
	}
	return "", fmt.Errorf("role.yaml has no ClusterRole")
}

// SyncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
