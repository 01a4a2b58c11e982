package crds_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/artifacts/crds"
)

func proxyCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	return crdNamed(t, "proxies.crawl.example.com")
}

func crdNamed(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	all, err := crds.CRDs()
	if err != nil {
		t.Fatalf("CRDs(): %v", err)
	}
	for _, crd := range all {
		if crd.Name == name {
			return crd
		}
	}
	t.Fatalf("CRDs() has no %s among %d CRDs", name, len(all))
	return nil
}

func TestCRDsDecodeFreshCopies(t *testing.T) {
	a := proxyCRD(t)
	if a.Spec.Group != crawlv1alpha1.GroupName || a.Spec.Names.Kind != "Proxy" {
		t.Fatalf("group/kind = %s/%s, want %s/Proxy", a.Spec.Group, a.Spec.Names.Kind, crawlv1alpha1.GroupName)
	}
	a.Spec.Group = "mutated.example.com"
	if b := proxyCRD(t); b.Spec.Group != crawlv1alpha1.GroupName {
		t.Errorf("mutating one result of CRDs() changed the next: group %q", b.Spec.Group)
	}
}

// TestCRDPassesAPIServerValidation runs the apiserver's own static CRD
// validation, which compiles every CEL rule and checks its estimated cost, so
// a rule over budget fails here without a control plane.
func TestCRDPassesAPIServerValidation(t *testing.T) {
	scheme := runtime.NewScheme()
	apiextensionsinstall.Install(scheme)

	validate := func(crd *apiextensionsv1.CustomResourceDefinition) []string {
		crd = crd.DeepCopy()
		scheme.Default(crd)
		crd.Status.StoredVersions = []string{"v1alpha1"}
		internal := &apiextensions.CustomResourceDefinition{}
		if err := scheme.Convert(crd, internal, nil); err != nil {
			t.Fatalf("converting CRD to internal: %v", err)
		}
		var msgs []string
		for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), internal) {
			msgs = append(msgs, e.Error())
		}
		return msgs
	}

	all, err := crds.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if errs := validate(c); len(errs) > 0 {
			t.Fatalf("generated CRD %s is invalid:\n%s", c.Name, strings.Join(errs, "\n"))
		}
	}
	crd := proxyCRD(t)

	// Negative control: a rule that does not compile is reported.
	broken := crd.DeepCopy()
	spec := broken.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.XValidations = append(spec.XValidations, apiextensionsv1.ValidationRule{Rule: "self.noSuchField == 1", Message: "x"})
	broken.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	if errs := validate(broken); len(errs) == 0 {
		t.Errorf("a CRD with an uncompilable CEL rule passed validation")
	}
}

// TestEveryRuleMessageNamesAField keeps the promise that an apiserver
// rejection tells the user which field to fix.
func TestEveryRuleMessageNamesAField(t *testing.T) {
	var rules int
	var walk func(path string, s apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
		for _, r := range s.XValidations {
			rules++
			if !strings.HasPrefix(r.Message, path) {
				t.Errorf("rule %q at %s: message %q does not start with the field path %q", r.Rule, path, r.Message, path)
			}
		}
		for name, child := range s.Properties {
			walk(path+"."+name, child)
		}
	}
	spec := proxyCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	walk("spec", spec)
	// Negative control on the walk itself: the spec-level rules were seen.
	if rules < 15 {
		t.Errorf("found %d CEL rules under spec, want at least 15", rules)
	}
	// A pool's template carries the Proxy spec and its rules: their
	// messages name the Proxy's fields (spec.…), which is what a pool
	// template's fields are called in them; the pool's own rules name
	// the pool's.
	before := rules
	pool := crdNamed(t, "proxypools.crawl.example.com").Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for name, child := range pool.Properties {
		if name != "template" {
			walk("spec."+name, child)
		}
	}
	for _, r := range pool.XValidations {
		rules++
		if !strings.HasPrefix(r.Message, "spec.") {
			t.Errorf("pool rule %q: message %q names no field", r.Rule, r.Message)
		}
	}
	for _, r := range pool.Properties["template"].Properties["spec"].XValidations {
		rules++
		if !strings.HasPrefix(r.Message, "spec.") {
			t.Errorf("pool template rule %q: message %q names no field", r.Rule, r.Message)
		}
	}
	if rules-before < 3 {
		t.Errorf("found %d CEL rules on the pool, want at least 3", rules-before)
	}
}

func TestCRDDefaultsMatchGoConstants(t *testing.T) {
	spec := proxyCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	hc := spec.Properties["healthCheck"]
	defaultOf := func(s apiextensionsv1.JSONSchemaProps) any {
		if s.Default == nil {
			return nil
		}
		var v any
		if err := json.Unmarshal(s.Default.Raw, &v); err != nil {
			t.Fatalf("decoding default %s: %v", s.Default.Raw, err)
		}
		return v
	}
	got := map[string]any{
		"spec.mode":                         defaultOf(spec.Properties["mode"]),
		"spec.healthCheck":                  defaultOf(hc),
		"spec.healthCheck.url":              defaultOf(hc.Properties["url"]),
		"spec.healthCheck.intervalSeconds":  defaultOf(hc.Properties["intervalSeconds"]),
		"spec.healthCheck.timeoutSeconds":   defaultOf(hc.Properties["timeoutSeconds"]),
		"spec.healthCheck.successThreshold": defaultOf(hc.Properties["successThreshold"]),
		"spec.healthCheck.failureThreshold": defaultOf(hc.Properties["failureThreshold"]),
		"spec.healthCheck.expectedStatus":   defaultOf(hc.Properties["expectedStatus"]),
		"spec.endpoint.port":                defaultOf(spec.Properties["endpoint"].Properties["port"]),
		"spec.cloudInit.secretRef.key":      defaultOf(spec.Properties["cloudInit"].Properties["secretRef"].Properties["key"]),
	}
	want := map[string]any{
		"spec.mode":                         string(crawlv1alpha1.ModeManaged),
		"spec.healthCheck":                  map[string]any{},
		"spec.healthCheck.url":              crawlv1alpha1.DefaultHealthCheckURL,
		"spec.healthCheck.intervalSeconds":  float64(crawlv1alpha1.DefaultHealthCheckIntervalSeconds),
		"spec.healthCheck.timeoutSeconds":   float64(crawlv1alpha1.DefaultHealthCheckTimeoutSeconds),
		"spec.healthCheck.successThreshold": float64(crawlv1alpha1.DefaultHealthCheckSuccessThreshold),
		"spec.healthCheck.failureThreshold": float64(crawlv1alpha1.DefaultHealthCheckFailureThreshold),
		"spec.healthCheck.expectedStatus":   float64(crawlv1alpha1.DefaultHealthCheckExpectedStatus),
		"spec.endpoint.port":                float64(crawlv1alpha1.ProxyPort),
		"spec.cloudInit.secretRef.key":      crawlv1alpha1.DefaultCloudInitSecretKey,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRD defaults differ from the Go constants (-want +got):\n%s", diff)
	}
}

func TestCRDNamesAndColumns(t *testing.T) {
	crd := proxyCRD(t)
	names := crd.Spec.Names
	if diff := cmp.Diff([]string{"px"}, names.ShortNames); diff != "" {
		t.Errorf("short names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"crawl"}, names.Categories); diff != "" {
		t.Errorf("categories (-want +got):\n%s", diff)
	}
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("scope = %s, want Namespaced", crd.Spec.Scope)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("status subresource missing")
	}
	var defaultCols []string
	for _, c := range v.AdditionalPrinterColumns {
		if c.Priority == 0 {
			defaultCols = append(defaultCols, c.Name+"="+c.JSONPath)
		}
	}
	want := []string{
		"Phase=.status.phase", "IP=.status.ip", "Latency=.status.latencyMillis",
		"Provider=.spec.provider", "Age=.metadata.creationTimestamp",
	}
	if diff := cmp.Diff(want, defaultCols); diff != "" {
		t.Errorf("default printer columns (-want +got):\n%s", diff)
	}
}

func TestProxyPoolCRD(t *testing.T) {
	crd := crdNamed(t, "proxypools.crawl.example.com")
	if diff := cmp.Diff([]string{"pxp"}, crd.Spec.Names.ShortNames); diff != "" {
		t.Errorf("short names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"crawl"}, crd.Spec.Names.Categories); diff != "" {
		t.Errorf("categories (-want +got):\n%s", diff)
	}
	v := crd.Spec.Versions[0]
	sc := v.Subresources.Scale
	if v.Subresources.Status == nil || sc == nil || sc.SpecReplicasPath != ".spec.replicas" || sc.StatusReplicasPath != ".status.replicas" ||
		sc.LabelSelectorPath == nil || *sc.LabelSelectorPath != ".status.selector" {
		t.Errorf("subresources %+v, want status and scale (spec.replicas, status.replicas, status.selector)", v.Subresources)
	}
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Desired", "Replicas", "Ready", "Leased", "Age"}, cols); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
}
