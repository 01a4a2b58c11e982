package gc_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/proxy-operator/proxy-operator/pkg/gc"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// The tag is the flag's when set; else derived from the cluster (its
// kube-system namespace's UID) and the operator's namespace, so two
// installations never share one; without kube-system it says what to do.
func TestInstallationTag(t *testing.T) {
	ctx := context.Background()
	kubeSystem := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem, UID: "cluster-uid"}}
	withNS := ctrlfake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(kubeSystem).Build()
	empty := ctrlfake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()

	if got, err := gc.InstallationTag(ctx, empty, "set-by-flag", "ops"); err != nil || got != "set-by-flag" {
		t.Errorf("with --instance-tag: %q, %v", got, err)
	}
	a, err := gc.InstallationTag(ctx, withNS, "", "ops")
	if err != nil || a != provider.InstallationTag("cluster-uid", "ops") {
		t.Errorf("derived: %q, %v; want %q", a, err, provider.InstallationTag("cluster-uid", "ops"))
	}
	if b, _ := gc.InstallationTag(ctx, withNS, "", "ops-2"); b == a {
		t.Errorf("two namespaces of one cluster share the tag %q", a)
	}
	if _, err := gc.InstallationTag(ctx, empty, "", "ops"); err == nil || !strings.Contains(err.Error(), "--instance-tag") {
		t.Errorf("without kube-system: %v, want an error naming --instance-tag", err)
	}
}
