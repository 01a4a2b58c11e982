package gcp

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/encoding/protojson"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testUID = "6f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b"

func fullRequest() provider.CreateRequest {
	return provider.CreateRequest{
		Name:      provider.NameFromUID(testUID),
		Tag:       "proxy-operator",
		OwnerUID:  testUID,
		Namespace: "crawl",
		CloudInit: "#cloud-config\npackages: [squid]\n",
		Proxy: &crawlv1alpha1.ProxySpec{
			Provider: Name,
			GCP: &crawlv1alpha1.GCPProviderSpec{
				Project:     "crawl-prod",
				Zone:        "europe-west1-b",
				MachineType: "e2-small",
				Image:       "projects/debian-cloud/global/images/family/debian-12",
				Network:     "crawl-vpc",
				Subnetwork:  "proxies",
				Tags:        []string{"squid", "proxy"},
				Labels:      map[string]string{"team": "crawl", LabelTag: "user-tries-to-override"},
				Spot:        true,
			},
		},
	}
}

func minimalRequest() provider.CreateRequest {
	r := fullRequest()
	r.CloudInit = ""
	r.Proxy = &crawlv1alpha1.ProxySpec{Provider: Name, GCP: &crawlv1alpha1.GCPProviderSpec{
		Zone: "us-central1-a", MachineType: "e2-micro", Image: "projects/debian-cloud/global/images/family/debian-12",
	}}
	return r
}

// TestBuildInsertRequestGolden pins the exact Insert call (protojson, as
// sent on the wire) for a full and a minimal spec. Run with -update after an
// intended change and review the diff.
func TestBuildInsertRequestGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		req    provider.CreateRequest
	}{
		{"insert-full.json", fullRequest()},
		{"insert-minimal.json", minimalRequest()},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			ir, err := buildInsertRequest("crawl-default", tc.req, 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(ir)
			if err != nil {
				t.Fatal(err)
			}
			// protojson's spacing is deliberately unstable; compare a
			// canonical form.
			got = canonicalJSON(t, got)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(canonicalJSON(t, want)), string(got)); diff != "" {
				t.Errorf("insert request (-want +got):\n%s", diff)
			}
		})
	}
}

func canonicalJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var m computepb.InsertInstanceRequest
	if err := protojson.Unmarshal(b, &m); err != nil {
		t.Fatalf("golden is not an InsertInstanceRequest: %v", err)
	}
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return append(bytes.ReplaceAll(out, []byte(":  "), []byte(": ")), '\n')
}

func TestBuildInsertRequestRules(t *testing.T) {
	ir, err := buildInsertRequest("crawl-default", fullRequest(), 0)
	if err != nil {
		t.Fatal(err)
	}
	inst := ir.GetInstanceResource()
	if got := inst.GetLabels()[LabelTag]; got != "proxy-operator" {
		t.Errorf("a user label must not override the ownership tag: %s=%q", LabelTag, got)
	}
	if got := inst.GetLabels()[LabelOwnerUID]; got != testUID {
		t.Errorf("owner label = %q, want the UID", got)
	}
	if ir.GetProject() != "crawl-prod" {
		t.Errorf("project = %q, want spec.gcp.project", ir.GetProject())
	}
	min, err := buildInsertRequest("crawl-default", minimalRequest(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if min.GetProject() != "crawl-default" {
		t.Errorf("project without spec.gcp.project = %q, want the default", min.GetProject())
	}

	// The requestId: stable for a retry, new for another spec, cloud-init,
	// owner or attempt, always a UUID.
	again, _ := buildInsertRequest("crawl-default", fullRequest(), 0)
	if again.GetRequestId() != ir.GetRequestId() {
		t.Errorf("requestId of an identical retry changed: %s then %s", ir.GetRequestId(), again.GetRequestId())
	}
	rotated := fullRequest()
	rotated.CloudInit += "# rotated\n"
	next, _ := buildInsertRequest("crawl-default", fullRequest(), 1)
	other, _ := buildInsertRequest("crawl-default", rotated, 0)
	seen := map[string]string{ir.GetRequestId(): "first"}
	for what, id := range map[string]string{"next attempt": next.GetRequestId(), "rotated cloud-init": other.GetRequestId(), "minimal": min.GetRequestId()} {
		if prev, dup := seen[id]; dup {
			t.Errorf("requestId of %s equals that of %s: %s", what, prev, id)
		}
		seen[id] = what
	}
	// The proxy auth configuration reaches the VM as its own metadata item,
	// beside the user data, and is part of the request.
	withAuth := fullRequest()
	withAuth.ProxyAuth = []byte(`{"namespace":"crawl","name":"vm-1"}`)
	authed, err := buildInsertRequest("crawl-default", withAuth, 0)
	if err != nil {
		t.Fatal(err)
	}
	items := map[string]string{}
	for _, it := range authed.GetInstanceResource().GetMetadata().GetItems() {
		items[it.GetKey()] = it.GetValue()
	}
	if d := cmp.Diff(map[string]string{MetadataUserData: withAuth.CloudInit, MetadataProxyAuth: string(withAuth.ProxyAuth)}, items); d != "" {
		t.Errorf("metadata with proxy auth (-want +got):\n%s", d)
	}
	if prev, dup := seen[authed.GetRequestId()]; dup {
		t.Errorf("requestId with proxy auth equals that of %s", prev)
	}
	for id := range seen {
		if len(id) != 36 || strings.Count(id, "-") != 4 || id[14] != '5' {
			t.Errorf("requestId %q is not a version-5-style UUID", id)
		}
	}
}

func TestBuildInsertRequestRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*provider.CreateRequest)
		field  string
	}{
		{"no gcp block", func(r *provider.CreateRequest) { r.Proxy.GCP = nil }, "spec.gcp"},
		{"no spec", func(r *provider.CreateRequest) { r.Proxy = nil }, "spec.gcp"},
		{"no zone", func(r *provider.CreateRequest) { r.Proxy.GCP.Zone = "" }, "spec.gcp.zone"},
		{"no machine type", func(r *provider.CreateRequest) { r.Proxy.GCP.MachineType = "" }, "spec.gcp.machineType"},
		{"no image", func(r *provider.CreateRequest) { r.Proxy.GCP.Image = "" }, "spec.gcp.image"},
		{"tag with a dot", func(r *provider.CreateRequest) { r.Tag = "proxy.operator" }, "instance tag"},
		{"no name", func(r *provider.CreateRequest) { r.Name = "" }, "createRequest.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := fullRequest()
			tc.mutate(&req)
			_, err := buildInsertRequest("crawl-default", req, 0)
			if !provider.IsPermanent(err) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %v, want ErrPermanent naming %s", err, tc.field)
			}
		})
	}
}

func TestStateOf(t *testing.T) {
	for _, tc := range []struct {
		status, natIP string
		want          provider.InstanceState
	}{
		{"PROVISIONING", "", provider.StateProvisioning},
		{"STAGING", "", provider.StateProvisioning},
		{"RUNNING", "", provider.StateProvisioning},
		{"RUNNING", "203.0.113.7", provider.StateRunning},
		{"STOPPING", "203.0.113.7", provider.StateStopped},
		{"SUSPENDING", "", provider.StateStopped},
		{"SUSPENDED", "", provider.StateStopped},
		{"STOPPED", "", provider.StateStopped},
		{"TERMINATED", "", provider.StateStopped},
		{"REPAIRING", "", provider.StateStopped},
		{"SOMETHING_NEW", "203.0.113.7", provider.StateStopped},
		{"", "", provider.StateStopped},
	} {
		if got := stateOf(tc.status, tc.natIP); got != tc.want {
			t.Errorf("stateOf(%q, %q) = %s, want %s", tc.status, tc.natIP, got, tc.want)
		}
	}
}

// apiError parses a body exactly as the generated client does.
func apiError(t *testing.T, code int, body string) error {
	t.Helper()
	resp := &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	err := googleapi.CheckResponseWithBody(resp, []byte(body))
	if err == nil {
		t.Fatalf("CheckResponse(%d) = nil", code)
	}
	return err
}

func body(code int, reason, msg string) string {
	return `{"error":{"code":` + strconv.Itoa(code) + `,"message":"` + msg + `","errors":[{"message":"` + msg + `","domain":"global","reason":"` + reason + `"}]}}`
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		body string
		want error
	}{
		{"not found", 404, body(404, "notFound", "The resource 'projects/p/zones/z/instances/i' was not found"), provider.ErrNotFound},
		{"rate limit 403", 403, body(403, "rateLimitExceeded", "Rate Limit Exceeded"), provider.ErrQuotaExceeded},
		{"user rate limit 403", 403, body(403, "userRateLimitExceeded", "User Rate Limit Exceeded"), provider.ErrQuotaExceeded},
		{"quota 403", 403, body(403, "quotaExceeded", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1."), provider.ErrQuotaExceeded},
		{"429 without reason", 429, `{"error":{"code":429,"message":"Too Many Requests"}}`, provider.ErrQuotaExceeded},
		{"quota message on a 400", 400, body(400, "invalid", "Quota 'IN_USE_ADDRESSES' exceeded.  Limit: 8.0 in region europe-west1."), provider.ErrQuotaExceeded},
		{"zone pool exhausted", 503, body(503, "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request."), provider.ErrQuotaExceeded},
		{"zone pool exhausted in message", 400, body(400, "resourceExhausted", "ZONE_RESOURCE_POOL_EXHAUSTED: try again later"), provider.ErrQuotaExceeded},
		{"resource not ready", 400, body(400, "resourceNotReady", "The resource 'projects/p/zones/z/instances/i' is not ready"), provider.ErrTransient},
		{"invalid", 400, body(400, "invalid", "Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/e2-huge'."), provider.ErrPermanent},
		{"unauthenticated", 401, body(401, "authError", "Invalid Credentials"), provider.ErrPermanent},
		{"forbidden", 403, body(403, "forbidden", "Required 'compute.instances.create' permission for 'projects/p/zones/z/instances/i'"), provider.ErrPermanent},
		{"conflict", 409, body(409, "resourceInUseByAnotherResource", "in use"), provider.ErrTransient},
		{"server error", 500, body(500, "backendError", "Internal error"), provider.ErrTransient},
		{"unavailable", 503, body(503, "backendError", "Service unavailable"), provider.ErrTransient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := classify(provider.OpCreate, apiError(t, tc.code, tc.body))
			if got := provider.Class(err); got != tc.want {
				t.Errorf("class = %v, want %v (%v)", got, tc.want, err)
			}
			if tc.want == provider.ErrPermanent && !strings.Contains(err.Error(), "compute engine") {
				t.Errorf("a permanent error must carry the API's message: %v", err)
			}
		})
	}
	if got := provider.Class(classify(provider.OpGet, io.ErrUnexpectedEOF)); got != provider.ErrTransient {
		t.Errorf("connection error class = %v, want transient", got)
	}
	if !isAlreadyExists(apiError(t, 409, body(409, "alreadyExists", "The resource 'projects/p/zones/z/instances/i' already exists"))) {
		t.Error("409 alreadyExists not recognised")
	}
	if isAlreadyExists(apiError(t, 409, body(409, "resourceInUseByAnotherResource", "in use"))) {
		t.Error("another 409 taken for alreadyExists")
	}
}

func TestProviderIDRoundTrip(t *testing.T) {
	for _, tc := range []struct{ project, zone, name, want string }{
		{"dflt", "us-central1-a", "proxy-abc", "zones/us-central1-a/instances/proxy-abc"},
		{"", "us-central1-a", "proxy-abc", "zones/us-central1-a/instances/proxy-abc"},
		{"other", "europe-west1-b", "proxy-abc", "projects/other/zones/europe-west1-b/instances/proxy-abc"},
	} {
		id := ProviderID("dflt", tc.project, tc.zone, tc.name)
		if id != tc.want {
			t.Errorf("ProviderID(%q,%q,%q) = %q, want %q", tc.project, tc.zone, tc.name, id, tc.want)
		}
		p, z, n, ok := ParseProviderID("dflt", id)
		wantP := tc.project
		if wantP == "" {
			wantP = "dflt"
		}
		if !ok || p != wantP || z != tc.zone || n != tc.name {
			t.Errorf("ParseProviderID(%q) = (%q,%q,%q,%v)", id, p, z, n, ok)
		}
	}
	for _, bad := range []string{"", "zones/z", "kubernetes://ns/name", "zones//instances/x", "projects/p/zones/z/disks/d", "a/b/c/d"} {
		if _, _, _, ok := ParseProviderID("dflt", bad); ok {
			t.Errorf("ParseProviderID(%q) accepted", bad)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	good := DefaultOptions()
	good.Project = "crawl-prod"
	if err := good.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Options)
		flag   string
	}{
		{"no project", func(o *Options) { o.Project = "" }, "--gcp-project"},
		{"bad project", func(o *Options) { o.Project = "Crawl_Prod" }, "--gcp-project"},
		{"bad allowed project", func(o *Options) { o.AllowedProjects = []string{"ok-project", "Bad Project"} }, `--gcp-allowed-projects: "Bad Project"`},
		{"endpoint without scheme", func(o *Options) { o.Endpoint = "127.0.0.1:9000" }, "--gcp-endpoint"},
		{"endpoint with path", func(o *Options) { o.Endpoint = "http://127.0.0.1:9000/compute/v1/" }, "--gcp-endpoint"},
		{"zero timeout", func(o *Options) { o.RequestTimeout = 0 }, "--gcp-request-timeout"},
	} {
		o := good
		tc.mutate(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.flag)
		}
	}
}
