package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ControllerManagerControllers are the kube-controller-manager controllers
// Options.ControllerManager runs: enough for Deployments to roll, a
// PodDisruptionBudget to guard evictions, Services to get EndpointSlices,
// namespaces their ServiceAccounts and tokens, and a new Node to lose its
// not-ready taint once its agent reports it Ready (node lifecycle).
func ControllerManagerControllers() []string {
	return []string{"deployment", "replicaset", "disruption", "endpointslice", "serviceaccount", "serviceaccount-token", "nodelifecycle"}
}

// startControllerManager runs kube-controller-manager (bin/, built from the
// pinned Kubernetes modules by `make tools`) against this control plane
// with the admin kubeconfig, and waits until it works: the serviceaccount
// controller has made namespace default its ServiceAccount.
func (cp *ControlPlane) startControllerManager(ctx context.Context) error {
	flags := map[string]string{
		"kubeconfig":                       cp.KubeconfigPath,
		"controllers":                      strings.Join(ControllerManagerControllers(), ","),
		"leader-elect":                     "false",
		"use-service-account-credentials":  "false",
		"service-account-private-key-file": cp.ServiceAccountSigningKeyPath,
		"root-ca-file":                     cp.CACertPath,
		// No scraping or probing of it here: no serving port to collide.
		"secure-port": "0",
		"profiling":   "false",
	}
	mergeFlags(flags, cp.opts.ControllerManagerFlags)
	p, err := startProcess("kube-controller-manager", filepath.Join(cp.opts.BinDir, "kube-controller-manager"), flagArgs(flags), cp.ControllerManagerLogPath, cp.opts.Out)
	if err != nil {
		return err
	}
	cp.controllerManager = p
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	err = poll(ctx, p, func() bool {
		_, err := kube.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	if err != nil {
		return &startError{process: "kube-controller-manager", err: fmt.Errorf("no default ServiceAccount made: %w", err), logTail: p.tail(40)}
	}
	return nil
}
