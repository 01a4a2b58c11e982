package gc

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// InstallationTag is tag or, empty, the tag of this installation
// (provider.InstallationTag of the cluster's kube-system namespace and the
// operator's namespace): the instances the collector may list and delete.
func InstallationTag(ctx context.Context, c client.Reader, tag, operatorNamespace string) (string, error) {
	if tag != "" {
		return tag, nil
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return "", fmt.Errorf("deriving the instance tag from namespace %s (or pass --instance-tag): %w", metav1.NamespaceSystem, err)
	}
	return provider.InstallationTag(ns.UID, operatorNamespace), nil
}
