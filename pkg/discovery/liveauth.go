package discovery

import (
	"net/http"
	"strings"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// liveList answers a proxy's auth helper: the leases live on it now (see
// pkg/proxyauth). The helper authenticates with its proxy's key (a list
// token), not a bearer token: it knows no token, and may read only its own
// proxy's list.
func (s *Server) liveList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := proxyauth.ProxyRef{Namespace: q.Get("namespace"), Name: q.Get("name")}
	if p.Namespace == "" || p.Name == "" {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidRequest, "query parameters namespace and name are required")
		return
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, proxyauth.AuthScheme) || strings.TrimSpace(token) == "" {
		w.Header().Set("WWW-Authenticate", proxyauth.AuthScheme+` realm="proxy-operator"`)
		writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized, "missing "+proxyauth.AuthScheme+" authorization (a proxy's list token)")
		return
	}
	l, err := s.opts.Service.LiveList(r.Context(), p, strings.TrimSpace(token))
	if err != nil {
		writeServiceError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}
