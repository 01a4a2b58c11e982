package gcp

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	htransport "google.golang.org/api/transport/http"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Name is the provider's registry name (spec.provider).
const Name = "gcp"

// computeScope is the OAuth scope of the four instance calls.
const computeScope = "https://www.googleapis.com/auth/compute"

// Provider runs proxy instances as Compute Engine VMs. Safe for concurrent
// use.
type Provider struct {
	client *compute.InstancesClient
	opts   Options

	mu sync.Mutex
	// attempts counts, per instance name, the incarnations this process has
	// seen end (a Get answered 404 or a Delete was sent): the next insert of
	// that name is a new request, not a retry of the old one.
	attempts map[string]int
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for opts (validated here too); it acts only in
// opts' projects. extra client options come last, for tests.
func New(ctx context.Context, opts Options, extra ...option.ClientOption) (*Provider, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("gcp provider: %w", err)
	}
	hc, err := httpClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	copts := []option.ClientOption{option.WithHTTPClient(hc)}
	if opts.Endpoint != "" {
		copts = append(copts, option.WithEndpoint(opts.Endpoint))
	}
	c, err := compute.NewInstancesRESTClient(ctx, append(copts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("gcp provider: creating the Compute Engine client: %w", err)
	}
	// Get retries 503/504 for up to 60s inside a 600s timeout by default;
	// the reconciler owns retries, so one bounded attempt per call.
	c.CallOptions.Get = []gax.CallOption{gax.WithTimeout(opts.RequestTimeout)}
	c.CallOptions.Insert = []gax.CallOption{gax.WithTimeout(opts.RequestTimeout)}
	c.CallOptions.Delete = []gax.CallOption{gax.WithTimeout(opts.RequestTimeout)}
	return &Provider{
		client:   c,
		opts:     opts,
		attempts: map[string]int{},
	}, nil
}

// httpClient is the transport of every call, with RequestTimeout as its
// timeout: the only bound AggregatedList honours. An emulator gets no
// credentials; anything else uses Application Default Credentials.
func httpClient(ctx context.Context, opts Options) (*http.Client, error) {
	if opts.emulator() {
		return &http.Client{Timeout: opts.RequestTimeout}, nil
	}
	hc, _, err := htransport.NewClient(ctx, option.WithScopes(computeScope))
	if err != nil {
		return nil, fmt.Errorf("gcp provider: Application Default Credentials: %w", err)
	}
	hc.Timeout = opts.RequestTimeout
	return hc, nil
}

// Close releases the client.
func (p *Provider) Close() error { return p.client.Close() }

// Create inserts the VM of req and returns without waiting for its
// Operation. An existing instance of that name (409 alreadyExists) is
// success and left untouched.
func (p *Provider) Create(ctx context.Context, req provider.CreateRequest) (string, error) {
	p.mu.Lock()
	attempt := p.attempts[req.Name]
	p.mu.Unlock()
	ir, err := buildInsertRequest(p.opts.Project, req, attempt)
	if err != nil {
		return "", err // ErrPermanent, naming the field
	}
	if err := p.opts.checkProject(provider.OpCreate, ir.Project); err != nil {
		return "", err
	}
	id := ProviderID(p.opts.Project, ir.Project, ir.Zone, req.Name)
	_, err = p.client.Insert(ctx, ir)
	switch {
	case err == nil:
		log.FromContext(ctx).V(1).Info("instance insert accepted", "providerID", id, "requestID", ir.GetRequestId())
		return id, nil
	case isAlreadyExists(err):
		return id, nil
	default:
		return "", classify(provider.OpCreate, fmt.Errorf("inserting %s: %w", id, err))
	}
}

// Get reads the VM behind providerID.
func (p *Provider) Get(ctx context.Context, providerID string) (*provider.Instance, error) {
	project, zone, name, ok := ParseProviderID(p.opts.Project, providerID)
	if !ok {
		return nil, provider.NewError(provider.ErrNotFound, provider.OpGet,
			fmt.Errorf("providerID %q is not of the form [projects/<p>/]zones/<z>/instances/<n>", providerID))
	}
	if err := p.opts.checkProject(provider.OpGet, project); err != nil {
		// Not ours to read: to the reconciler, no instance of ours.
		return nil, provider.NewError(provider.ErrNotFound, provider.OpGet, fmt.Errorf("providerID %q: %w", providerID, err))
	}
	inst, err := p.client.Get(ctx, &computepb.GetInstanceRequest{Project: project, Zone: zone, Instance: name})
	if err != nil {
		if isNotFound(err) {
			p.incarnationEnded(name)
		}
		return nil, classify(provider.OpGet, fmt.Errorf("getting %s: %w", providerID, err))
	}
	out := p.instance(project, zone, inst)
	out.ProviderID = providerID // as asked, even if the default project changed since
	return &out, nil
}

// Delete starts deleting the VM behind providerID; a missing VM is success.
// An instance still being created answers 400 resourceNotReady, which is
// transient.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	project, zone, name, ok := ParseProviderID(p.opts.Project, providerID)
	if !ok {
		return nil // never issued, so nothing to delete
	}
	if p.opts.checkProject(provider.OpDelete, project) != nil {
		// Never ours: a VM in another project is never deleted, whatever
		// a providerID says.
		log.FromContext(ctx).Info("not deleting an instance outside --gcp-project and --gcp-allowed-projects", "providerID", providerID)
		return nil
	}
	_, err := p.client.Delete(ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zone, Instance: name})
	if err == nil || isNotFound(err) {
		p.incarnationEnded(name)
		return nil
	}
	return classify(provider.OpDelete, fmt.Errorf("deleting %s: %w", providerID, err))
}

func (p *Provider) incarnationEnded(name string) {
	p.mu.Lock()
	p.attempts[name]++
	p.mu.Unlock()
}

// instance translates a Compute Engine instance.
func (p *Provider) instance(project, zone string, inst *computepb.Instance) provider.Instance {
	ip := natIPOf(inst)
	state := stateOf(inst.GetStatus(), ip)
	if state != provider.StateRunning {
		ip = ""
	}
	created, err := time.Parse(time.RFC3339, inst.GetCreationTimestamp())
	if err != nil || created.IsZero() {
		// The contract needs a non-zero time; an unparsable stamp must
		// not make an instance look brand new to GC forever, nor old:
		// the Unix epoch would be "old", so use now (young: spared).
		created = time.Now()
	}
	return provider.Instance{
		ProviderID: ProviderID(p.opts.Project, project, zone, inst.GetName()),
		Name:       inst.GetName(),
		Tag:        inst.GetLabels()[LabelTag],
		OwnerUID:   types.UID(inst.GetLabels()[LabelOwnerUID]),
		SpecHash:   inst.GetLabels()[LabelSpecHash],
		State:      state,
		IP:         ip,
		CreatedAt:  created,
		Scope:      scope(project, zone),
	}
}
