package apiserver

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// The requestheader CA (kube-system/extension-apiserver-authentication) is
// read by the library's ConfigMap controller from an informer that fills
// only once the server listens: its "run once" at start reads the empty
// informer cache. Until then a request kube-apiserver proxied cannot be
// authenticated, and the delegating authenticator falls through to
// system:anonymous, whose request is answered 403 Forbidden — a wrong
// answer, seen when a just-started replica received requests during a
// handover (test/e2e/ha). frontProxyReadiness answers such requests 503 with
// Retry-After instead, and Server.Ready keeps the replica not Ready (so
// unlabelled, so out of the lease APIs' Services) until the CA is loaded.
type frontProxyReadiness struct {
	verifyOptions x509request.VerifyOptionFunc
	// usernameHeaders are the headers that name a proxied request's user.
	usernameHeaders headerrequest.StringSliceProvider
}

func newFrontProxyReadiness(cfg *authenticatorfactory.RequestHeaderConfig) *frontProxyReadiness {
	return &frontProxyReadiness{verifyOptions: cfg.CAContentProvider.VerifyOptions, usernameHeaders: cfg.UsernameHeaders}
}

// errFrontProxyCANotLoaded says why the server cannot yet authenticate the
// front proxy.
var errFrontProxyCANotLoaded = errors.New("the front proxy's CA (kube-system/extension-apiserver-authentication) is not loaded yet: requests that kube-apiserver proxies cannot be authenticated")

// ready is nil once the front proxy's CA is loaded, or when the cluster
// names no front-proxy user header (its kube-apiserver proxies to no
// aggregated server: there is nothing to wait for). The header names are
// read at start with a direct GET of the ConfigMap, so they are known.
func (f *frontProxyReadiness) ready() error {
	if len(f.usernameHeaders.Value()) == 0 {
		return nil
	}
	if _, ok := f.verifyOptions(); !ok {
		return errFrontProxyCANotLoaded
	}
	return nil
}

// proxied: the request carries a client certificate and a front-proxy user
// header, as every request kube-apiserver proxies does.
func (f *frontProxyReadiness) proxied(r *http.Request) bool {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	return firstHeader(r.Header, f.usernameHeaders.Value()) != ""
}

// wrap answers proxied requests 503 with Retry-After: 1 while the CA is not
// loaded; everything else goes to next.
func (f *frontProxyReadiness) wrap(next http.Handler, codecs serializer.CodecFactory) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f.ready(); err != nil && f.proxied(r) {
			st := apierrors.NewServiceUnavailable(err.Error())
			st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
			w.Header().Set("Retry-After", "1")
			responsewriters.ErrorNegotiated(st, codecs, leasingv1alpha1.SchemeGroupVersion, w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
