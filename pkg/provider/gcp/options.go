package gcp

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// Options configure the provider.
type Options struct {
	// Project is the default project (a Proxy's spec.gcp.project
	// overrides it). Required when the provider is enabled.
	Project string
	// AllowedProjects are the other projects a Proxy's spec.gcp.project may
	// name. ListByTag (and so the garbage collector) reads Project and
	// these, never a project only a Proxy names: a Proxy author must not
	// point this operator at another team's project.
	AllowedProjects []string
	// Endpoint of the Compute Engine API. Empty: the real API with
	// Application Default Credentials (Workload Identity in a cluster). An
	// http:// URL is an emulator (test/gcefake): no credentials are sent.
	// An https:// URL is another endpoint reached with credentials.
	Endpoint string
	// RequestTimeout bounds each API call, including each page of a
	// listing (the client's AggregatedList ignores its context).
	RequestTimeout time.Duration
}

// DefaultOptions returns the production defaults.
func DefaultOptions() Options {
	return Options{RequestTimeout: 30 * time.Second}
}

// AddFlags registers the --gcp-* flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Project, "gcp-project", o.Project, "Default Compute Engine project of the gcp provider (required when it is enabled; spec.gcp.project overrides it).")
	fs.StringSliceVar(&o.AllowedProjects, "gcp-allowed-projects", o.AllowedProjects, "Other Compute Engine projects a Proxy's spec.gcp.project may name (comma-separated); the gcp provider creates, reads, deletes and lists VMs only in --gcp-project and these.")
	fs.StringVar(&o.Endpoint, "gcp-endpoint", o.Endpoint, "Compute Engine API endpoint (default: the real API with Application Default Credentials; an http:// URL means an emulator and no credentials).")
	fs.DurationVar(&o.RequestTimeout, "gcp-request-timeout", o.RequestTimeout, "Upper bound of one Compute Engine API call (each page of a listing included).")
}

// projectPattern is the syntax of a project ID (with the legacy domain
// prefix, e.g. example.com:my-project).
var projectPattern = regexp.MustCompile(`^[a-z][-a-z0-9.:]*[a-z0-9]$`)

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	switch {
	case o.Project == "":
		errs = append(errs, errors.New("--gcp-project: required when the gcp provider is enabled"))
	case !projectPattern.MatchString(o.Project) || len(o.Project) > 128:
		errs = append(errs, fmt.Errorf("--gcp-project %q: not a project ID (lowercase letters, digits, '-', at most 128 characters)", o.Project))
	}
	for _, pr := range o.AllowedProjects {
		if !projectPattern.MatchString(pr) || len(pr) > 128 {
			errs = append(errs, fmt.Errorf("--gcp-allowed-projects: %q is not a project ID", pr))
		}
	}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--gcp-endpoint %q: %w", o.Endpoint, err))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("--gcp-endpoint %q: must be an http:// (emulator) or https:// URL", o.Endpoint))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("--gcp-endpoint %q: no host", o.Endpoint))
		case strings.Trim(u.Path, "/") != "":
			// Each client method appends /compute/v1/projects/…; a path
			// here would double it.
			errs = append(errs, fmt.Errorf("--gcp-endpoint %q: must have no path (the client adds /compute/v1/…)", o.Endpoint))
		}
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--gcp-request-timeout: must be positive, got %s", o.RequestTimeout))
	}
	return errors.Join(errs...)
}

// projects are the projects the provider acts in, sorted.
func (o *Options) projects() []string {
	out := append([]string{o.Project}, o.AllowedProjects...)
	slices.Sort(out)
	return slices.Compact(out)
}

// checkProject refuses a project the provider may not act in: a permanent
// error naming the flags.
func (o *Options) checkProject(op, project string) error {
	if project == o.Project || slices.Contains(o.AllowedProjects, project) {
		return nil
	}
	return provider.NewError(provider.ErrPermanent, op, fmt.Errorf(
		"project %q is not one this operator may use: only --gcp-project (%s) and --gcp-allowed-projects (%s)",
		project, o.Project, strings.Join(o.AllowedProjects, ",")))
}

// emulator reports an http:// endpoint: no credentials.
func (o *Options) emulator() bool { return strings.HasPrefix(o.Endpoint, "http://") }
