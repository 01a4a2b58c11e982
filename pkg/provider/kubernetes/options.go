package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// Options configure the provider.
type Options struct {
	// Namespace receives every pod. Default: the namespace of the Proxy
	// (CreateRequest.Namespace). When set, ListByTag looks only there, so a
	// namespaced Role is enough.
	Namespace string
	// Image of the Squid container. Default DefaultImage.
	Image string
	// AllowedImages are the images a Proxy's spec.kubernetes.image may name
	// besides Image and DefaultImage: whoever may create a Proxy must not
	// run any image they like with the operator's rights.
	AllowedImages []string
	// NodeName, when set, goes into spec.nodeName: the pod lands on that node
	// without a scheduler (the local node agent's node).
	NodeName string
	// AllowProxyNodeName lets a Proxy's spec.kubernetes.nodeName place its
	// pod (bypassing the scheduler, and with it taints and quotas of node
	// selection); refused otherwise.
	AllowProxyNodeName bool
	// HelperImage holds the proxy auth helper at /proxy-auth-helper (the
	// operator's image). Default DefaultHelperImage.
	HelperImage string
	// Egress is where the pods that check credentials take a lease's
	// requests (the --proxy-allowed-* flags, proxyauth.Options.Egress):
	// written into each pod's squid.conf, and opened in the NetworkPolicy.
	Egress proxyauth.Egress
	// NetworkPolicy keeps the NetworkPolicy of the Squid pods
	// (NetworkPolicyName) in each namespace that has them.
	NetworkPolicy bool
	// OperatorNamespace is where the operator's discovery API runs, which
	// the policy lets the pods' auth helpers reach (set by the composition
	// root; required with NetworkPolicy).
	OperatorNamespace string
}

// DefaultOptions are the defaults: the pinned image, the pods' NetworkPolicy
// kept.
func DefaultOptions() Options { return Options{NetworkPolicy: true} }

func (o *Options) helperImage() string {
	if o.HelperImage == "" {
		return DefaultHelperImage
	}
	return o.HelperImage
}

// AddFlags registers the provider's flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Namespace, "kubernetes-pod-namespace", o.Namespace, "Namespace of the kubernetes provider's Squid pods (default: the Proxy's namespace).")
	fs.StringVar(&o.Image, "kubernetes-pod-image", o.Image, "Squid image of the kubernetes provider (default: its pinned image).")
	fs.StringSliceVar(&o.AllowedImages, "kubernetes-allowed-images", o.AllowedImages, "Images a Proxy's spec.kubernetes.image may name besides --kubernetes-pod-image and the pinned Squid image (comma-separated; default none: any other image fails the Proxy).")
	fs.StringVar(&o.NodeName, "kubernetes-pod-node-name", o.NodeName, "Set spec.nodeName of the kubernetes provider's pods (bypasses the scheduler; e.g. the local node agent's node).")
	fs.StringVar(&o.HelperImage, "kubernetes-auth-helper-image", o.HelperImage, "Image whose /proxy-auth-helper an init container copies into each Squid pod (default: the operator's own image, read from its pod $"+PodNameEnv+", else "+DefaultHelperImage+").")
	fs.BoolVar(&o.NetworkPolicy, "kubernetes-network-policy", o.NetworkPolicy, "Keep the NetworkPolicy "+NetworkPolicyName+" of the Squid pods in each namespace that has them (ingress to the proxy port only; egress to DNS, the operator's discovery API and public addresses only, plus --proxy-allowed-cidrs), deleted with the namespace's last Squid pod. An existing policy's spec is left as it is.")
	fs.BoolVar(&o.AllowProxyNodeName, "kubernetes-allow-proxy-node-name", o.AllowProxyNodeName, "Let a Proxy's spec.kubernetes.nodeName place its pod on a node, bypassing the scheduler (default: such a Proxy fails).")
}

// Validate reports every invalid option, named by its flag.
func (o *Options) Validate() error {
	var errs []error
	if ns := o.Namespace; ns != "" {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--kubernetes-pod-namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if n := o.NodeName; n != "" {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--kubernetes-pod-node-name %q: %s", n, strings.Join(msgs, "; ")))
		}
	}
	for _, img := range o.AllowedImages {
		if img == "" || strings.ContainsAny(img, " \t\n") {
			errs = append(errs, fmt.Errorf("--kubernetes-allowed-images: %q is not an image reference", img))
		}
	}
	return errors.Join(errs...)
}

// imageFor is the image of a pod whose Proxy asks for requested ("": none):
// the provider's own, or one the options allow.
func (o *Options) imageFor(requested string) (string, error) {
	image := o.Image
	if image == "" {
		image = DefaultImage
	}
	switch {
	case requested == "":
		return image, nil
	case requested == image, requested == DefaultImage, slices.Contains(o.AllowedImages, requested):
		return requested, nil
	}
	return "", fmt.Errorf("spec.kubernetes.image %q is not allowed: an operator admin must list it in --kubernetes-allowed-images (allowed now: %s)",
		requested, strings.Join(append([]string{image}, o.AllowedImages...), ", "))
}

// nodeNameFor is the spec.nodeName of a pod whose Proxy asks for requested
// ("": none).
func (o *Options) nodeNameFor(requested string) (string, error) {
	switch {
	case requested == "":
		return o.NodeName, nil
	case !o.AllowProxyNodeName:
		return "", fmt.Errorf("spec.kubernetes.nodeName %q is not allowed: it bypasses the scheduler; an operator admin may allow it with --kubernetes-allow-proxy-node-name", requested)
	}
	return requested, nil
}

// PodNameEnv names the operator's own pod (the Downward API, in the
// install): its image is the default helper image.
const PodNameEnv = "POD_NAME"

// DefaultHelperImageFrom sets HelperImage, when no flag set it, to the image
// of container in the operator's own pod namespace/podName (the install
// sets $POD_NAME): the operator's image, which holds the helper too, so that
// the image an overlay sets is the one Squid pods copy the helper from.
// Without a pod name it leaves the default.
func (o *Options) DefaultHelperImageFrom(ctx context.Context, c client.Reader, namespace, podName, container string) error {
	if o.HelperImage != "" || podName == "" {
		return nil
	}
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: podName}, &pod); err != nil {
		return fmt.Errorf("reading the operator's pod %s/%s for its image (set --kubernetes-auth-helper-image instead): %w", namespace, podName, err)
	}
	for _, ct := range pod.Spec.Containers {
		if ct.Name == container {
			o.HelperImage = ct.Image
			return nil
		}
	}
	return fmt.Errorf("the operator's pod %s/%s has no container %q (set --kubernetes-auth-helper-image)", namespace, podName, container)
}

// NewInOperator is the provider as the operator in pod podName of namespace
// runs it: the helper image defaulted from container's image there
// (DefaultHelperImageFrom), the proxies' egress egress, their configuration
// in namespace.
func NewInOperator(ctx context.Context, c client.Client, o Options, namespace, podName, container string, egress proxyauth.Egress) (*Provider, error) {
	if err := o.DefaultHelperImageFrom(ctx, c, namespace, podName, container); err != nil {
		return nil, err
	}
	o.Egress, o.OperatorNamespace = egress, namespace
	return New(c, o)
}
