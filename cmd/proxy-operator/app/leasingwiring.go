package app

import (
	"context"
	"fmt"
	"os"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/proxy-operator/proxy-operator/pkg/apiserver"
	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/gateway"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/metrics"
	kubeprovider "github.com/proxy-operator/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
	"github.com/proxy-operator/proxy-operator/pkg/serving"
)

// setupLeasing builds the lease wing (leasing.NewWing) and adds it to mgr
// with the servers of its leases, each through its leasing.Service counting
// on leaseMetrics: the HTTP lease API, the gateway, the aggregated API. They
// run on every replica; only the one that leads serves leases.
func setupLeasing(ctx context.Context, mgr manager.Manager, cfg *rest.Config, kube kubernetes.Interface, o *Options, reg prometheus.Registerer, leaseMetrics *metrics.Metrics, keyring *proxyauth.Keyring, instances *proxyauth.Instances, denied dialpolicy.Denylist) (*leasing.Wing, *leasing.Takeover, error) {
	logger := log.FromContext(ctx)
	var err error
	var tokens discovery.Tokens
	var tokenSecret *discovery.TokenSecret
	if o.Discovery.Enabled() {
		if tokens, tokenSecret, err = o.Discovery.LoadTokens(ctx, os.Getenv, kube.CoreV1(), o.Namespace); err != nil {
			return nil, nil, err
		}
	}
	clk := clock.RealClock{}
	wc := leasing.WingConfig{Options: o.Leasing, IDs: o.LeaseIDs, Checkpoint: o.Checkpoint,
		Codec: proxylease.MetadataCodec{}, Recorder: leaseMetrics, Secrets: kube.CoreV1(), Clock: clk}
	if keyring != nil {
		wc.Auth = keyring
	}
	if o.Election.Enabled {
		wc.Leader = leasing.LeaseHolder(kube.CoordinationV1(), o.Election.LeaseNamespace(o.Namespace), o.Election.ID, clk)
	}
	wing, err := leasing.NewWing(wc)
	if err != nil {
		return nil, nil, err
	}
	// In a pod, the lease path stops at shutdown only once the pod has left
	// the lease APIs' Services (pkg/serving). Outside a pod nil.
	labeller, err := serving.LabellerOf(o.Serving, o.Namespace, os.Getenv(kubeprovider.PodNameEnv), kube, wing.Gate.IsOpen, clk)
	if err != nil {
		return nil, nil, err
	}
	addServing := func(r manager.Runnable) error {
		if labeller != nil {
			return mgr.Add(labeller.Hold(r))
		}
		return mgr.Add(r)
	}
	takeover, err := wing.Register(ctx, mgr, addServing, reg)
	if err != nil {
		return nil, nil, err
	}

	var servingCert *certs.Manager
	var managedCert dynamiccertificates.CertKeyContentProvider
	var ca []byte
	if o.Certs.Enabled() {
		if servingCert, err = certs.NewEnsuredManager(ctx, o.Certs, cfg, kube); err != nil {
			return nil, nil, err
		}
		if err := mgr.Add(servingCert); err != nil {
			return nil, nil, fmt.Errorf("adding the serving certificate manager: %w", err)
		}
		managedCert, ca = servingCert, servingCert.CABundle()
		if instances != nil {
			// Proxies poll the discovery API, which serves this certificate.
			instances.DefaultCA(servingCert.CABundle)
		}
	}

	// The gateway on the replica that serves leases calls the lease API in
	// this process (nil: no API here).
	var localAPI *gateway.LocalAPI
	if o.Discovery.Enabled() {
		svc, err := wing.Service(leasing.APIHTTP, o.Discovery.MaxWait, leaseMetrics)
		if err != nil {
			return nil, nil, err
		}
		srv, err := o.Discovery.NewServer(tokens, svc, managedCert, kube)
		if err != nil {
			return nil, nil, err
		}
		if err := addServing(srv); err != nil {
			return nil, nil, fmt.Errorf("adding discovery server: %w", err)
		}
		localAPI = &gateway.LocalAPI{Leaser: srv.InProcess(), Serving: wing.Gate.IsOpen}
		wing.FinalAfter(srv.Stopped())
		if tokenSecret != nil {
			if err := mgr.Add(tokenSecret.Follow(srv)); err != nil {
				return nil, nil, fmt.Errorf("adding the discovery token follower: %w", err)
			}
		}
	} else {
		logger.Info("HTTP discovery API disabled (--discovery-bind-address=0)")
	}

	if o.Gateway.Enabled() {
		g, err := o.Gateway.NewGateway(ca, localAPI, leaseMetrics, denied)
		if err != nil {
			return nil, nil, err
		}
		if err := addServing(g); err != nil {
			return nil, nil, fmt.Errorf("adding the gateway: %w", err)
		}
	}

	if o.APIServer.Enabled() {
		// Delegated authn/authz read kube-system/extension-apiserver-authentication
		// here, so kube-apiserver must be reachable (as for the manager).
		svc, err := wing.Service(leasing.APIKubernetes, o.APIServer.MaxWait, leaseMetrics)
		if err != nil {
			return nil, nil, err
		}
		srv, err := apiserver.New(o.APIServer, apiserver.Deps{Service: svc, RESTConfig: cfg, Clock: clk, ServingCert: managedCert})
		if err != nil {
			return nil, nil, fmt.Errorf("creating aggregated API server: %w", err)
		}
		if err := addServing(srv); err != nil {
			return nil, nil, fmt.Errorf("adding aggregated API server: %w", err)
		}
		// Not Ready until it can authenticate kube-apiserver's requests.
		if err := mgr.AddReadyzCheck("apiserver", srv.Ready); err != nil {
			return nil, nil, fmt.Errorf("adding the apiserver readyz check: %w", err)
		}
		wing.FinalAfter(srv.Stopped())
		wing.OnRestored(srv.Restored)
	} else {
		logger.Info("aggregated ProxyLease API server disabled (--" + apiserver.FlagPrefix + "secure-port=0)")
	}
	if labeller != nil {
		if err := mgr.Add(labeller); err != nil {
			return nil, nil, fmt.Errorf("adding the serving labeller: %w", err)
		}
	}
	return wing, takeover, nil
}
