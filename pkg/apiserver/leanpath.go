package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/proxy-operator/proxy-operator/pkg/registry/proxylease"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// The crawler's hot path — create one ProxyLease, later delete it, through
// kube-apiserver — is served by leanPath, ahead of the generic server's
// handler chain, which costs about three times what a lease does: a
// goroutine per filter stage (timeouts, the request finisher) whose stacks
// grow through the chain's depth, tracing spans, latency trackers,
// managed-fields bookkeeping on every create (docs/benchmarks.md has the
// profile). leanPath takes only requests it can answer exactly as the
// generic server would, minus managedFields:
//
//   - from the front proxy (kube-apiserver, which authorized this very
//     request) and only with Options.TrustFrontProxyAuthorization;
//   - POST …/namespaces/{ns}/proxyleases or DELETE …/proxyleases/{name},
//     with no query parameters (no dry run, field manager or validation
//     directive: kubectl's requests name a field manager, so they take the
//     generic path) and a JSON body that decodes strictly.
//
// Everything else — a direct request, any other verb or resource, a body
// with unknown fields — goes to the generic chain unchanged (a body already
// read is handed on whole). Both paths call the same proxylease.REST, so defaulting,
// validation, naming, the lease service and its errors are one code path. The
// lean path reads the body with decode (a scanner for the plain bodies
// clients send, the strict decoder otherwise) and writes the answer with
// appendProxyLeaseJSON: reflective JSON was a quarter of this server's CPU,
// and tests hold both to the generic server's serializer.
type leanPath struct {
	// prefix is "/apis/<group>/<version>/namespaces/".
	prefix   string
	next     http.Handler
	authn    *frontProxyAuthenticator
	rest     *proxylease.REST
	codecs   serializer.CodecFactory
	typer    runtime.ObjectTyper
	encoder  runtime.Encoder
	maxBytes int64
	// buffers hold encoded answers between requests (a ProxyLease is about
	// 1.5 KB of JSON; growing a buffer to it was a tenth of the allocations).
	buffers sync.Pool
}

// answerBufferSize fits a ProxyLease's JSON.
const answerBufferSize = 4 << 10

// leanPathMaxBody is the generic server's request body limit.
const leanPathMaxBody = 3 << 20

func newLeanPath(next http.Handler, authn *frontProxyAuthenticator, rest *proxylease.REST, scheme *runtime.Scheme, codecs serializer.CodecFactory) *leanPath {
	return &leanPath{
		prefix: "/" + path.Join("apis", leasingv1alpha1.SchemeGroupVersion.Group, leasingv1alpha1.SchemeGroupVersion.Version, "namespaces") + "/",
		next:   next,
		authn:  authn,
		rest:   rest,
		codecs: codecs,
		typer:  scheme,
		encoder: codecs.EncoderForVersion(serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme, serializerjson.SerializerOptions{}),
			leasingv1alpha1.SchemeGroupVersion),
		maxBytes: leanPathMaxBody,
	}
}

// route parses a lease path: namespace, and name ("" for the collection).
func (p *leanPath) route(urlPath string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(urlPath, p.prefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] == leasingv1alpha1.ResourceProxyLeases:
		return parts[0], "", true
	case len(parts) == 3 && parts[0] != "" && parts[1] == leasingv1alpha1.ResourceProxyLeases && parts[2] != "":
		return parts[0], parts[2], true
	}
	return "", "", false
}

func (p *leanPath) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	namespace, name, ok := p.route(r.URL.Path)
	lean := ok && r.URL.RawQuery == "" && r.Header.Get("Content-Type") == runtime.ContentTypeJSON && acceptsPlainJSON(r.Header.Get("Accept")) &&
		((r.Method == http.MethodPost && name == "") || (r.Method == http.MethodDelete && name != ""))
	if !lean {
		p.next.ServeHTTP(w, r)
		return
	}
	// Only the front proxy: anything else (no client certificate, another
	// one, no user headers) is the generic chain's to authenticate. The user
	// headers stay in place, for a request handed on after all.
	resp, authenticated, err := p.authn.authenticate(r)
	if err != nil || !authenticated {
		p.next.ServeHTTP(w, r)
		return
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, p.maxBytes), r.ContentLength)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		p.error(w, r, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the request body is over %d bytes", tooLarge.Limit)))
		return
	case err != nil:
		p.error(w, r, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err)))
		return
	}
	// What the body decodes into; with no body, all defaults.
	var pl leasingv1alpha1.ProxyLease
	var opts metav1.DeleteOptions
	if len(body) > 0 {
		if r.Method == http.MethodPost {
			err = p.decode(body, &pl, &pl.TypeMeta)
		} else {
			err = p.decode(body, &opts, &opts.TypeMeta)
		}
		if err != nil {
			// Unknown fields, a wrong kind, bad JSON: the generic chain
			// decides, with its warnings and messages.
			r.Body = io.NopCloser(bytes.NewReader(body))
			p.next.ServeHTTP(w, r)
			return
		}
	}

	// No deadline of its own: the lease service bounds a wait by
	// --apiserver-max-wait, and the caller's leaving ends it.
	ctx := genericapirequest.WithNamespace(r.Context(), namespace)
	ctx = genericapirequest.WithUser(ctx, resp.User)
	defer func() {
		if v := recover(); v != nil {
			utilruntime.HandleError(fmt.Errorf("ProxyLease %s %s panicked: %v", r.Method, r.URL.Path, v))
			p.error(w, r, apierrors.NewInternalError(fmt.Errorf("%v", v)))
		}
	}()
	switch r.Method {
	case http.MethodPost:
		created, err := p.rest.Create(ctx, &pl, nil, &metav1.CreateOptions{})
		p.answer(w, r, http.StatusCreated, created, err)
	case http.MethodDelete:
		deleted, _, err := p.rest.Delete(ctx, name, nil, &opts)
		p.answer(w, r, http.StatusOK, deleted, err)
	}
}

// readBody reads a body whose length is usually known up front into a
// buffer of that size (bytes.Buffer.ReadFrom would grow it by 512 bytes
// first), then reads on to the end, in case the body is longer.
func readBody(r io.Reader, length int64) ([]byte, error) {
	if length <= 0 || length > leanPathMaxBody {
		return io.ReadAll(r)
	}
	buf := make([]byte, length)
	n, err := io.ReadFull(r, buf)
	if err != nil {
		return buf[:n], err
	}
	var probe [1]byte
	for {
		n, err := r.Read(probe[:])
		switch {
		case n > 0:
			rest, err := io.ReadAll(r)
			return append(append(buf, probe[0]), rest...), err
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// acceptsPlainJSON reports whether a client sending accept takes the object
// as plain JSON (client-go sends "application/json, */*"); a request for a
// Table, YAML or protobuf goes to the generic chain, which negotiates.
func acceptsPlainJSON(accept string) bool {
	if accept == "" {
		return true
	}
	for part := range strings.SplitSeq(accept, ",") {
		switch strings.TrimSpace(part) {
		case runtime.ContentTypeJSON, "*/*", "application/*":
		default:
			return false
		}
	}
	return true
}

// answer writes obj as JSON (the request accepted nothing else) or err as a
// Status, as the generic server would.
func (p *leanPath) answer(w http.ResponseWriter, r *http.Request, status int, obj runtime.Object, err error) {
	if err != nil {
		p.error(w, r, err)
		return
	}
	buf, _ := p.buffers.Get().(*bytes.Buffer)
	if buf == nil {
		buf = bytes.NewBuffer(make([]byte, 0, answerBufferSize))
	}
	defer func() {
		if buf.Cap() <= 4*answerBufferSize {
			buf.Reset()
			p.buffers.Put(buf)
		}
	}()
	if pl, ok := obj.(*leasingv1alpha1.ProxyLease); ok {
		if out, ok := appendProxyLeaseJSON(buf.AvailableBuffer(), pl); ok {
			buf.Write(out)
		}
	}
	if buf.Len() == 0 {
		if err := p.encoder.Encode(obj, buf); err != nil {
			p.error(w, r, apierrors.NewInternalError(fmt.Errorf("encoding the ProxyLease: %w", err)))
			return
		}
	}
	w.Header().Set("Content-Type", runtime.ContentTypeJSON)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (p *leanPath) error(w http.ResponseWriter, r *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, p.codecs, leasingv1alpha1.SchemeGroupVersion, w, r)
}
