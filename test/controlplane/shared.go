package controlplane

import (
	"context"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
)

// Shared is one control plane for every test of a package: started by the
// first test that asks for it (a -run that selects none starts none), stopped
// when the package's tests end. Tests that share it keep apart by namespace
// (Namespace). A package uses it as
//
//	var shared = controlplane.NewShared(controlplane.Options{...})
//
//	func TestMain(m *testing.M) {
//		os.Exit(framework.Main(m, "pkg", func(_ context.Context, e *framework.Env) error {
//			e.Share(shared)
//			return nil
//		}))
//	}
type Shared struct {
	opts Options

	once sync.Once
	cp   *ControlPlane
	kube kubernetes.Interface
	err  error
}

// NewShared is a Shared control plane started with opts.
func NewShared(opts Options) *Shared { return &Shared{opts: opts} }

// Stop stops the control plane if one started (framework.Env.Share calls
// it when the package's tests end).
func (s *Shared) Stop() error {
	if s.cp == nil {
		return nil
	}
	return s.cp.Stop()
}

// Started is the control plane if a test started it, else nil.
func (s *Shared) Started() *ControlPlane { return s.cp }

// Get is the control plane, started on the first call; a start that failed
// fails every test that asks.
func (s *Shared) Get(t testing.TB) *ControlPlane {
	t.Helper()
	s.once.Do(func() {
		s.cp, s.err = Start(context.Background(), s.opts)
		if s.err == nil {
			s.kube, s.err = kubernetes.NewForConfig(s.cp.RESTConfig())
		}
	})
	if s.err != nil {
		t.Fatalf("starting the package's control plane: %v", s.err)
	}
	return s.cp
}

// Namespace creates a namespace of its own for t, named after prefix, on the
// shared control plane. It outlives t (the control plane goes with the
// package): a deletion would race what t's last goroutines still write.
func (s *Shared) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	s.Get(t)
	name := strings.TrimSuffix(prefix, "-") + "-" + rand.String(6)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := s.kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}
