package kubernetesprovider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// The Squid pods pass Pod Security "restricted" as kube-apiserver's own
// admission enforces it, carry a Secret's cloud-init as its volume only, and
// run (the node agent reads the volume as a kubelet would); a Proxy that
// names an image or a node the options do not allow fails permanently
// (#26 item 8). The negative control: the pod the provider built before is
// refused by the same namespace.
func TestPodsPassPodSecurityRestricted(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	const ns = "restricted"
	e.restrictedNamespace(t, ns)
	const userData = "#cloud-config\n# restricted\n"
	if err := e.admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boot", Namespace: ns},
		StringData: map[string]string{"userData": userData}}); err != nil {
		t.Fatal(err)
	}
	p, err := kubernetes.New(e.admin, kubernetes.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	uid := uuid.NewUUID()
	req := provider.CreateRequest{Name: provider.NameFromUID(uid), Tag: provider.DefaultTag, OwnerUID: uid, Namespace: ns,
		CloudInit: userData, CloudInitSecret: &provider.SecretKeyRef{Name: "boot", Key: "userData"}}
	id, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("a pod of the provider in a restricted namespace: %v", err)
	}
	var pod corev1.Pod
	if err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: req.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	for _, env := range pod.Spec.Containers[0].Env {
		if strings.Contains(env.Value, "restricted") {
			t.Errorf("the Secret's user data is in the environment: %s", env.Name)
		}
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
	if data, err := os.ReadFile(filepath.Join(inst.Dir, nodeagent.UserDataFile)); err != nil || string(data) != userData {
		t.Errorf("user data the instance received = (%q, %v), want %q", data, err, userData)
	}

	// Negative control: the provider's pod as it was built before, without
	// a securityContext, is refused by the same admission.
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unrestricted", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "squid", Image: kubernetes.DefaultImage}}}}
	if err := e.admin.Create(ctx, old); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("a pod without a securityContext in the restricted namespace: %v, want Forbidden by PodSecurity", err)
	}

	for _, tc := range []struct {
		name string
		spec crawlv1alpha1.KubernetesProviderSpec
		flag string
	}{
		{"another image", crawlv1alpha1.KubernetesProviderSpec{Image: "example.org/anything:1"}, "--kubernetes-allowed-images"},
		{"a node", crawlv1alpha1.KubernetesProviderSpec{NodeName: nodeName}, "--kubernetes-allow-proxy-node-name"},
	} {
		uid := uuid.NewUUID()
		req := provider.CreateRequest{Name: provider.NameFromUID(uid), Tag: provider.DefaultTag, OwnerUID: uid, Namespace: ns,
			Proxy: &crawlv1alpha1.ProxySpec{Provider: kubernetes.Name, Kubernetes: &tc.spec}}
		if _, err := p.Create(ctx, req); !provider.IsPermanent(err) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("a Proxy naming %s: %v, want a permanent error naming %s", tc.name, err, tc.flag)
		}
		if err := e.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: req.Name}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Proxy naming %s got a pod: %v", tc.name, err)
		}
	}
}

// restrictedNamespace creates namespace ns with Pod Security "restricted"
// enforced by kube-apiserver's admission.
func (e *env) restrictedNamespace(t *testing.T, ns string) {
	t.Helper()
	if err := e.admin.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}); err != nil {
		t.Fatal(err)
	}
}
