package discovery

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

type openAPIOperation struct {
	OperationID string `json:"operationId"`
	RequestBody *struct {
		Content map[string]struct {
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema struct {
				Ref string `json:"$ref"`
			} `json:"schema"`
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func loadOpenAPI(t *testing.T) (openAPIDoc, map[string]openAPIOperation) {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	ops := map[string]openAPIOperation{}
	for path, item := range doc.Paths {
		for key, raw := range item {
			if !slices.Contains(httpMethods, key) {
				continue // "parameters" etc.
			}
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", key, path, err)
			}
			ops[strings.ToUpper(key)+" "+path] = op
		}
	}
	return doc, ops
}

// TestOpenAPIMatchesRoutes: every route the server registers is documented,
// every documented operation is served, and the mux resolves each documented
// path to exactly that route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, ops := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi version %q, want 3.x", doc.OpenAPI)
	}
	store, _ := lease.New(lease.Options{}, nil)
	s, err := New(Options{Service: realService(t, store)})
	if err != nil {
		t.Fatal(err)
	}
	var served, documented []string
	for _, r := range s.routes() {
		served = append(served, r.method+" "+r.path)
	}
	for k := range ops {
		documented = append(documented, k)
	}
	slices.Sort(served)
	slices.Sort(documented)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("routes (-served +documented):\n%s", diff)
	}
	for key := range ops {
		method, path, _ := strings.Cut(key, " ")
		req := httptest.NewRequest(method, strings.ReplaceAll(path, "{id}", "some-id"), nil)
		if _, pattern := s.mux.Handler(req); pattern != key {
			t.Errorf("documented %s resolves to mux pattern %q", key, pattern)
		}
	}
}

// TestOpenAPIExamplesDecode: request examples pass the server's own strict
// decoders, response examples decode strictly into the wire types.
func TestOpenAPIExamplesDecode(t *testing.T) {
	_, ops := loadOpenAPI(t)
	requestDecoders := map[string]func([]byte) error{
		"acquireLease": func(b []byte) error { _, err := DecodeAcquireRequest(b); return err },
		"reportLease": func(b []byte) error {
			r, err := DecodeReportRequest(b)
			if err == nil && !lease.ValidResult(r.Result) {
				t.Errorf("report example result %q is invalid", r.Result)
			}
			return err
		},
		"renewLease": func(b []byte) error { _, err := DecodeRenewRequest(b); return err },
	}
	schemaTypes := map[string]func() any{
		"#/components/schemas/Health":    func() any { return new(wire.Health) },
		"#/components/schemas/Error":     func() any { return new(wire.Error) },
		"#/components/schemas/ProxyList": func() any { return new(wire.ProxyList) },
		"#/components/schemas/Lease":     func() any { return new(wire.Lease) },
		"#/components/schemas/LiveList":  func() any { return new(proxyauth.LiveList) },
	}
	examples := 0
	for key, op := range ops {
		if op.RequestBody != nil {
			ex := op.RequestBody.Content["application/json"].Example
			dec, ok := requestDecoders[op.OperationID]
			switch {
			case !ok:
				t.Errorf("%s has a request body but no decoder in this test", key)
			case len(ex) == 0:
				t.Errorf("%s: request body without an example", key)
			default:
				examples++
				if err := dec(ex); err != nil {
					t.Errorf("%s request example %s: %v", key, ex, err)
				}
			}
		}
		for status, resp := range op.Responses {
			c, ok := resp.Content["application/json"]
			if !ok || len(c.Example) == 0 {
				continue
			}
			newT, ok := schemaTypes[c.Schema.Ref]
			if !ok {
				t.Errorf("%s %s: no Go type for schema %q", key, status, c.Schema.Ref)
				continue
			}
			examples++
			v := newT()
			dec := json.NewDecoder(bytes.NewReader(c.Example))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Errorf("%s %s example: %v", key, status, err)
			}
			if e, ok := v.(*wire.Error); ok && (e.Error == "" || e.Message == "") {
				t.Errorf("%s %s: error example without code or message", key, status)
			}
		}
	}
	if examples < 15 {
		t.Errorf("only %d examples checked", examples)
	}
}
