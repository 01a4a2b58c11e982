package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	unionauth "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	restclient "k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	generatedopenapi "github.com/proxy-operator/proxy-operator/pkg/generated/openapi"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// Deps are what the server is built around.
type Deps struct {
	// Service is this API's lease path over the lease store the HTTP
	// discovery API also serves (required); its limits bound
	// spec.ttlSeconds and spec.waitSeconds.
	Service *leasing.Service
	// RESTConfig reaches kube-apiserver for delegated authentication and
	// authorization (TokenReview, SubjectAccessReview, the
	// extension-apiserver-authentication ConfigMap) when neither
	// --apiserver-authentication-kubeconfig nor
	// --apiserver-authorization-kubeconfig is set; pass the manager's config.
	// Nil: the in-cluster config.
	RESTConfig *restclient.Config
	// Clock drives the table's EXPIRES/AGE and the resourceVersion base; nil
	// means the real clock. Use the lease store's clock.
	Clock clock.PassiveClock
	// ServingCert is the serving certificate when
	// --apiserver-tls-cert-file is unset (the operator's own, from
	// pkg/certs); nil: a self-signed one kept in memory.
	ServingCert dynamiccertificates.CertKeyContentProvider
}

// Server is the aggregated API server as a controller-runtime Runnable. Build
// it with New and add it with mgr.Add; it is not leader-elected (every replica
// serves its own leases).
type Server struct {
	generic     *genericapiserver.GenericAPIServer
	leases      *proxylease.REST
	closeCache  func()
	caBundle    []byte
	startedOnce sync.Once
	stopped     chan struct{}
	// frontProxy is nil without requestheader authentication.
	frontProxy *frontProxyReadiness
}

// New builds the server: serving certificate, delegated authn/authz (this
// reads kube-system/extension-apiserver-authentication, so kube-apiserver must
// be reachable), OpenAPI, and the proxyleases storage over deps.Service. It does
// not listen until Start.
func New(opts *Options, deps Deps) (_ *Server, retErr error) {
	if deps.Service == nil {
		return nil, errors.New("apiserver: Deps.Service is required")
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("apiserver options: %w", err)
	}
	if !opts.Enabled() {
		return nil, fmt.Errorf("apiserver is disabled (--%ssecure-port=0); do not build it", FlagPrefix)
	}
	clk := deps.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	namerScheme, err := newOpenAPINamerScheme()
	if err != nil {
		return nil, err
	}
	codecs := newCodecs(scheme)

	managedCert := deps.ServingCert != nil && opts.SecureServing.ServerCert.CertKey.CertFile == ""
	if !managedCert {
		if err := opts.selfSignedCert(); err != nil {
			return nil, err
		}
	}
	config := genericapiserver.NewConfig(codecs)
	config.EffectiveVersion = utilcompatibility.DefaultBuildEffectiveVersion()
	config.EnableProfiling = false
	config.EnableIndex = false
	if err := opts.SecureServing.ApplyTo(&config.SecureServing, &config.LoopbackClientConfig); err != nil {
		return nil, fmt.Errorf("secure serving: %w", err)
	}
	if managedCert {
		config.SecureServing.Cert = deps.ServingCert
	}
	defer func() {
		// ApplyTo has bound the port; a server that is not returned must not
		// keep it.
		if retErr != nil && config.SecureServing != nil && config.SecureServing.Listener != nil {
			_ = config.SecureServing.Listener.Close()
		}
	}()
	if err := applyDelegation(opts, deps.RESTConfig, config); err != nil {
		return nil, err
	}
	leases, closeCache := proxylease.NewREST(deps.Service, clk, opts.WatchHistory)
	defer func() {
		if retErr != nil {
			closeCache()
		}
	}()
	var frontProxyReady *frontProxyReadiness
	if rh := config.Authentication.RequestHeaderConfig; rh != nil {
		frontProxyReady = newFrontProxyReadiness(rh)
		var frontProxy *frontProxyAuthenticator
		if opts.TrustFrontProxyAuthorization {
			frontProxy = newFrontProxyAuthenticator(rh, clk)
			config.Authentication.Authenticator = unionauth.New(frontProxy, config.Authentication.Authenticator)
			config.Authorization.Authorizer = frontProxyAuthorizer{delegate: config.Authorization.Authorizer}
		}
		config.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
			h := genericapiserver.DefaultBuildHandlerChain(apiHandler, c)
			if frontProxy != nil {
				h = newLeanPath(h, frontProxy, leases, scheme, codecs)
			}
			return frontProxyReady.wrap(h, codecs)
		}
	}
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, openapi.NewDefinitionNamer(namerScheme))
	config.OpenAPIConfig.Info.Title = "ProxyLease"
	config.OpenAPIConfig.Info.Version = leasingv1alpha1.SchemeGroupVersion.Version
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, openapi.NewDefinitionNamer(namerScheme))
	config.OpenAPIV3Config.Info.Title = "ProxyLease"
	config.OpenAPIV3Config.Info.Version = leasingv1alpha1.SchemeGroupVersion.Version

	generic, err := config.Complete(nil).New("proxy-lease-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("building the generic API server: %w", err)
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(leasingv1alpha1.GroupName, scheme, metav1.ParameterCodec, codecs)
	group.VersionedResourcesStorageMap[leasingv1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		leasingv1alpha1.ResourceProxyLeases:                                           leases,
		leasingv1alpha1.ResourceProxyLeases + "/" + leasingv1alpha1.SubresourceReport: proxylease.NewReportREST(deps.Service),
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing %s: %w", leasingv1alpha1.GroupName, err)
	}

	s := &Server{generic: generic, leases: leases, closeCache: closeCache, stopped: make(chan struct{}), frontProxy: frontProxyReady}
	if gen := opts.SecureServing.ServerCert.GeneratedCert; gen != nil {
		s.caBundle = caOfChain(gen)
	}
	return s, nil
}

// applyDelegation configures delegated authentication and authorization,
// through a kubeconfig made from restConfig unless a flag names one.
func applyDelegation(opts *Options, restConfig *restclient.Config, config *genericapiserver.Config) error {
	authn, authz := *opts.Authentication, *opts.Authorization
	if restConfig != nil && authn.RemoteKubeConfigFile == "" && authz.RemoteKubeConfigFile == "" {
		path, remove, err := delegationKubeconfig(restConfig)
		if err != nil {
			return err
		}
		// Read below: the clients are built from it and keep no reference.
		defer remove()
		authn.RemoteKubeConfigFile = path
		authz.RemoteKubeConfigFile = path
	}
	if err := authn.ApplyTo(&config.Authentication, config.SecureServing, config.OpenAPIConfig); err != nil {
		return fmt.Errorf("delegated authentication: %w", err)
	}
	if err := authz.ApplyTo(&config.Authorization); err != nil {
		return fmt.Errorf("delegated authorization: %w", err)
	}
	return nil
}

// caOfChain returns the issuer of a generated self-signed serving
// certificate (the last certificate of its chain), for an APIService's
// caBundle.
func caOfChain(gen dynamiccertificates.CertKeyContentProvider) []byte {
	certPEM, _ := gen.CurrentCertKeyContent()
	blocks := splitPEM(certPEM)
	if len(blocks) == 0 {
		return nil
	}
	return blocks[len(blocks)-1]
}

// CABundle is the PEM CA that signed the self-signed serving certificate
// (nil when a certificate was given with --apiserver-tls-cert-file): put it in
// the APIService's spec.caBundle.
func (s *Server) CABundle() []byte { return s.caBundle }

// Start serves until ctx ends, then shuts down. It logs through the logger in
// ctx and uses ctx as its only stop signal (no signal handler of its own).
func (s *Server) Start(ctx context.Context) error {
	started := false
	s.startedOnce.Do(func() { started = true })
	if !started {
		return errors.New("apiserver: Start called twice")
	}
	logger := log.FromContext(ctx).WithName("apiserver")
	defer close(s.stopped)
	defer s.closeCache()
	var stopping atomic.Int64 // when ctx ended, in Unix nanoseconds
	go func() {
		// Close the watches at once so the HTTP server's shutdown does not wait
		// for them.
		<-ctx.Done()
		stopping.Store(time.Now().UnixNano())
		s.closeCache()
	}()
	logger.Info("serving the ProxyLease API", "group", leasingv1alpha1.GroupName)
	if err := s.generic.PrepareRun().RunWithContext(ctx); err != nil {
		return fmt.Errorf("aggregated API server: %w", err)
	}
	if at := stopping.Load(); at != 0 {
		// How long a handover waited for this server's requests.
		logger.Info("stopped serving the ProxyLease API", "shutdownMillis", time.Since(time.Unix(0, at)).Milliseconds())
	}
	return nil
}

// Ready is a readyz check: nil once this server can authenticate the
// requests kube-apiserver proxies to it (its front-proxy CA is loaded, which
// happens only after it started listening). A replica that is not Ready
// takes no serving label, so no proxied request reaches it before then.
func (s *Server) Ready(*http.Request) error {
	if s.frontProxy == nil {
		return nil
	}
	return s.frontProxy.ready()
}

// NeedLeaderElection is false: every replica listens; the lease Gate decides
// which serves leases (a standby answers 503).
func (s *Server) NeedLeaderElection() bool { return false }

// Restored makes resourceVersions continue from a lease checkpoint just
// loaded into the store: rvBase is the checkpoint's base (see
// checkpoint.Checkpointer.RVBase). Call it before this replica serves.
func (s *Server) Restored(rvBase uint64) { s.leases.Restored(rvBase) }

// Stopped is closed once Start has returned: the server takes no more
// requests and those in flight have been answered.
func (s *Server) Stopped() <-chan struct{} { return s.stopped }
