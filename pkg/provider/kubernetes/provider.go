package kubernetes

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Name is the provider's registry name (spec.provider).
const Name = "kubernetes"

// Provider runs proxy instances as Squid pods. Safe for concurrent use.
type Provider struct {
	c    client.Client
	opts Options
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider that manages pods through c. c should read from the
// API server directly (see the package documentation).
func New(c client.Client, opts Options) (*Provider, error) {
	if c == nil {
		return nil, errors.New("kubernetes provider: a client is required")
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes provider: %w", err)
	}
	if opts.NetworkPolicy && opts.OperatorNamespace == "" {
		return nil, errors.New("kubernetes provider: the pods' NetworkPolicy needs the operator's namespace")
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	return &Provider{c: c, opts: opts}, nil
}

// Create creates the pod of req. An existing pod of that name is success and
// left untouched (idempotent by name, as the contract requires).
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	ns := podNamespace(req, p.opts)
	if ns == "" {
		return "", provider.NewError(provider.ErrPermanent, provider.OpCreate,
			errors.New("no namespace for the pod: set the provider's namespace or the request's"))
	}
	pod, err := buildPod(req, p.opts)
	if err != nil {
		return "", provider.NewError(provider.ErrPermanent, provider.OpCreate, err)
	}
	id := ProviderID(ns, req.Name)
	if len(req.ProxyAuth) > 0 {
		// Before the pod, which mounts it.
		if err := p.ensureAuthSecret(ctx, req, ns); err != nil {
			return "", err
		}
	}
	err = p.c.Create(ctx, pod)
	switch {
	case err == nil:
		log.FromContext(ctx).V(1).Info("pod created", "providerID", id)
	case apierrors.IsAlreadyExists(err):
		if !p.opts.NetworkPolicy {
			return id, nil
		}
		// An earlier attempt's pod: it owns the policy too.
		if err := p.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return "", classify(provider.OpCreate, fmt.Errorf("reading %s: %w", describe(ns, req.Name), err))
		}
	default:
		return "", classify(provider.OpCreate, fmt.Errorf("creating %s: %w", describe(ns, req.Name), err))
	}
	if p.opts.NetworkPolicy {
		// After the pod, which owns it: a pod is not leased before it is
		// Ready, and the policy is there long before.
		if err := p.keepNetworkPolicy(ctx, pod); err != nil {
			return "", err
		}
	}
	return id, nil
}

// Get reads the pod behind providerID.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	ns, name, ok := ParseProviderID(providerID)
	if !ok {
		return nil, provider.NewError(provider.ErrNotFound, provider.OpGet,
			fmt.Errorf("providerID %q is not of the form %s<namespace>/<name>", providerID, ProviderIDPrefix))
	}
	var pod corev1.Pod
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		return nil, classify(provider.OpGet, fmt.Errorf("reading %s: %w", describe(ns, name), err))
	}
	inst := instanceFromPod(&pod)
	return &inst, nil
}

// Delete starts deleting the pod behind providerID; a missing pod is success.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	ns, name, ok := ParseProviderID(providerID)
	if !ok {
		return nil // never issued, so nothing to delete
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = ns, name
	err := p.c.Delete(ctx, pod)
	if err == nil || apierrors.IsNotFound(err) {
		return p.deleteAuthSecret(ctx, ns, name)
	}
	return classify(provider.OpDelete, fmt.Errorf("deleting %s: %w", describe(ns, name), err))
}

// ListByTag lists the pods labelled with tag: in the provider's namespace if
// one is configured, else in all namespaces.
func (p *Provider) ListByTag(ctx context.Context, tag string) ([]provider.Instance, error) {
	var pods corev1.PodList
	opts := []client.ListOption{client.MatchingLabels{provider.TagLabel: tag}}
	if p.opts.Namespace != "" {
		opts = append(opts, client.InNamespace(p.opts.Namespace))
	}
	if err := p.c.List(ctx, &pods, opts...); err != nil {
		return nil, classify(provider.OpList, fmt.Errorf("listing pods tagged %q: %w", tag, err))
	}
	out := make([]provider.Instance, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, instanceFromPod(&pods.Items[i]))
	}
	return out, nil
}
