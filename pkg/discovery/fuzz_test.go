package discovery

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/ (CI runs them as plain
// tests); fuzz longer by hand, e.g.
//   go test ./pkg/discovery -run '^$' -fuzz FuzzDecodeAcquireRequest -fuzztime 1m

// The bounds of ttlSeconds and waitSeconds are the leasing Service's (its
// tests); decoding checks shape, sizes and characters.
var knownCodes = []string{wire.CodeInvalidJSON, wire.CodeInvalidRequest, wire.CodeInvalidQuery}

// checkRejection: every rejection is a *RequestError with a 400 code and a message.
func checkRejection(t *testing.T, err error) {
	t.Helper()
	var re *RequestError
	if !errors.As(err, &re) {
		t.Fatalf("rejection is %T (%v), want *RequestError", err, err)
	}
	if !slices.Contains(knownCodes, re.Code) || re.Message == "" {
		t.Fatalf("rejection %+v: unknown code or empty message", re)
	}
}

func FuzzDecodeAcquireRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeAcquireRequest(data)
		if err != nil {
			checkRejection(t, err)
			return
		}
		if len(req.Flow) > maxFlowLen {
			t.Fatalf("accepted out-of-bounds request %+v", req)
		}
		if ValidateAcquireRequest(req) != nil {
			t.Fatalf("decoded request fails validation: %+v", req)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := DecodeAcquireRequest(again)
		if err != nil {
			t.Fatalf("re-encoded request %s rejected: %v", again, err)
		}
		if diff := cmp.Diff(req, req2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

func FuzzDecodeReportRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeReportRequest(data)
		if err != nil {
			checkRejection(t, err)
			return
		}
		again, _ := json.Marshal(req)
		req2, err := DecodeReportRequest(again)
		if err != nil || req2 != req {
			t.Fatalf("round trip %+v → %s → %+v, %v", req, again, req2, err)
		}
	})
}

func FuzzDecodeRenewRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRenewRequest(data)
		if err != nil {
			checkRejection(t, err)
			return
		}
		again, _ := json.Marshal(req)
		if req2, err := DecodeRenewRequest(again); err != nil || req2 != req {
			t.Fatalf("round trip %+v → %s → %+v, %v", req, again, req2, err)
		}
	})
}

func FuzzParseProxyQuery(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := ParseProxyQuery(raw)
		if err != nil {
			checkRejection(t, err)
			return
		}
		if len(q.Selector) > leasingv1alpha1.MaxSelectorEntries {
			t.Fatalf("accepted %d pairs", len(q.Selector))
		}
		for k := range q.Selector {
			if k == "" {
				t.Fatal("accepted an empty attribute name")
			}
		}
		q2, err := ParseProxyQuery(q.Encode())
		if err != nil {
			t.Fatalf("re-encoded query %q rejected: %v", q.Encode(), err)
		}
		if diff := cmp.Diff(q, q2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
