package discovery

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// wrap applies the middleware, outermost first: recover → request log →
// body limit → bearer auth.
func (s *Server) wrap(h http.Handler) http.Handler {
	return s.recoverer(s.requestLog(s.limitBody(s.authenticate(h))))
}

// recorder remembers the status for the request log and whether the
// headers went out (a panic after that cannot send a 500).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type requestInfoKey struct{}

// requestInfo is filled in by inner middleware for the request log.
type requestInfo struct {
	identity string
	// namespaces are the identity's (nil: every namespace).
	namespaces []string
}

// tokenFrom is what the request's token stands for.
func tokenFrom(ctx context.Context) Token {
	if ri, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok && ri.identity != "" {
		return Token{Identity: ri.identity, Namespaces: ri.namespaces}
	}
	return Token{Identity: AnonymousIdentity}
}

// leasingIdentity is tok's identity as the lease service takes it: holder,
// flow (flow "" = the identity's default) and namespaces.
func leasingIdentity(tok Token, flow string) leasing.Identity {
	id := leasing.HTTPIdentity(tok.Identity, flow)
	id.Namespaces = tok.Namespaces
	return id
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			log.FromContext(r.Context()).Error(fmt.Errorf("panic: %v", v), "discovery handler panicked",
				"method", r.Method, "path", r.URL.Path, "stack", string(debug.Stack()))
			if rec.status == 0 {
				writeError(rec, http.StatusInternalServerError, wire.CodeInternal, "internal error; the request may be retried")
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

func (s *Server) requestLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &requestInfo{}
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, ri))
		next.ServeHTTP(w, r)
		status := 0
		if rec, ok := w.(*recorder); ok {
			status = rec.status
		}
		// logr's lookup, not controller-runtime's FromContext: that one adds
		// (empty) values to the logger, an allocation per request.
		logger, err := logr.FromContext(r.Context())
		if err != nil {
			logger = log.Log
		}
		msg := "discovery request failed"
		if status < 500 {
			// Successes are logged at V(1), usually off: then nothing is
			// built for them.
			if logger = logger.V(1); !logger.Enabled() {
				return
			}
			msg = "discovery request"
		}
		logger.Info(msg, "method", r.Method, "path", r.URL.Path, "status", status,
			"durationMillis", time.Since(start).Milliseconds(), "identity", ri.identity, "remoteAddr", r.RemoteAddr)
	})
}

func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge,
				fmt.Sprintf("request body is %d bytes, at most %d allowed", r.ContentLength, s.opts.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A proxy's helper authenticates with its proxy's key (liveList).
		if r.URL.Path == "/healthz" || r.URL.Path == proxyauth.LivePath {
			next.ServeHTTP(w, r)
			return
		}
		tok, refused := s.identify(r.Context(), bearerToken(r.Header.Get("Authorization")))
		if refused != nil {
			refused.write(w)
			return
		}
		if ri, _ := r.Context().Value(requestInfoKey{}).(*requestInfo); ri != nil {
			ri.identity, ri.namespaces = tok.Identity, tok.Namespaces
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken is the token of an "Authorization: Bearer <token>" header
// ("" for any other).
func bearerToken(header string) string {
	scheme, token, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// identify is the one check of a lease API token, for the HTTP API and its
// in-process callers (InProcess): what token stands for, or the answer that
// refuses it (401 unknown, 403 a ServiceAccount not allowed, 503 the review
// failed). With auth off everyone is AnonymousIdentity.
func (s *Server) identify(ctx context.Context, token string) (Token, *answer) {
	if !s.AuthEnabled() {
		return Token{Identity: AnonymousIdentity}, nil
	}
	token = strings.TrimSpace(token)
	tok, ok := s.tokenFor(token)
	if !ok && s.opts.Kubernetes != nil && token != "" && len(token) <= maxKubernetesToken {
		var err error
		if tok, err = s.opts.Kubernetes.Authenticate(ctx, token); err != nil {
			switch {
			case IsForbidden(err):
				return Token{}, &answer{status: http.StatusForbidden, body: wire.Error{Error: wire.CodeForbidden, Message: err.Error()}}
			case !errors.Is(err, ErrUnknownToken):
				return Token{}, &answer{status: http.StatusServiceUnavailable, retryAfter: 1,
					body: wire.Error{Error: wire.CodeUnavailable, Message: "cannot review the token now: " + err.Error()}}
			}
		}
		ok = err == nil
	}
	if !ok {
		return Token{}, &answer{status: http.StatusUnauthorized, unauthorized: true,
			body: wire.Error{Error: wire.CodeUnauthorized, Message: "missing or invalid bearer token"}}
	}
	return tok, nil
}

// maxKubernetesToken bounds a token sent for review (a ServiceAccount token
// is about a kilobyte).
const maxKubernetesToken = 16 << 10

// tokenFor checks token against every configured token in constant time
// (hashes make the lengths equal; no early exit).
func (s *Server) tokenFor(token string) (Token, bool) {
	if token == "" {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(token))
	var tok Token
	matched := 0
	for _, t := range *s.tokens.Load() {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			tok, matched = t.Token, 1
		}
	}
	return tok, matched == 1
}
