package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/controller"
	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

func (e *env) secret(name string, labelled bool, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		StringData: data,
	}
	if labelled {
		s.Labels = map[string]string{crawlv1alpha1.CloudInitSecretLabel: "true"}
	}
	return s
}

func (e *env) withSecretRef(name, secret, key string) *crawlv1alpha1.Proxy {
	p := e.managed(name)
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: secret, Key: key}}
	return p
}

// createdCloudInit returns the cloud-init the instance of the Proxy was
// created with.
func (e *env) createdCloudInit(p *crawlv1alpha1.Proxy) string {
	e.t.Helper()
	req, ok := e.fake.Request(p.Status.ProviderID)
	if !ok {
		e.t.Fatalf("no instance %s", p.Status.ProviderID)
	}
	return req.CloudInit
}

func TestCloudInitInline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	p := e.managed("inline")
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{UserData: "#cloud-config\npackages: [squid]\n"}
	e.create(p)
	p = e.waitProvisioned("inline")
	if got := e.createdCloudInit(p); got != "#cloud-config\npackages: [squid]\n" {
		t.Errorf("cloud-init = %q", got)
	}
	if req, _ := e.fake.Request(p.Status.ProviderID); req.CloudInitSecret != nil {
		t.Errorf("inline cloud-init named a Secret: %+v", req.CloudInitSecret)
	}
}

// A labelled Secret is read (default key userData); rotating its content
// re-enqueues the Proxy through the Secret watch and replaces the instance.
func TestCloudInitSecretRotationReplaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.create(e.secret("ci", true, map[string]string{"userData": "v1"}))
	e.create(e.withSecretRef("rot", "ci", ""))
	p := e.waitProvisioned("rot")
	if got := e.createdCloudInit(p); got != "v1" {
		t.Fatalf("cloud-init = %q, want v1", got)
	}
	// The provider is told where the data comes from, to mount it rather
	// than copy it (#26 item 8).
	if req, _ := e.fake.Request(p.Status.ProviderID); req.CloudInitSecret == nil || *req.CloudInitSecret != (provider.SecretKeyRef{Name: "ci", Key: "userData"}) {
		t.Errorf("the create request names the Secret %+v, want ci/userData", req.CloudInitSecret)
	}
	id, gen := p.Status.ProviderID, p.Generation

	e.fake.ResetCalls()
	var s corev1.Secret
	if err := e.c.Get(context.Background(), e.key("ci"), &s); err != nil {
		t.Fatal(err)
	}
	s.Data["userData"] = []byte("v2")
	if err := e.c.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("rot", corev1.EventTypeNormal, controller.EventReasonReplacing)
	p = e.waitProxy("rot", "replaced with v2", func(p *crawlv1alpha1.Proxy) bool {
		req, ok := e.fake.Request(p.Status.ProviderID)
		return p.IsProvisioned() && ok && req.CloudInit == "v2"
	})
	if p.Generation != gen {
		t.Errorf("generation %d → %d: the spec must not change on rotation", gen, p.Generation)
	}
	if p.Status.ProviderID != id {
		t.Errorf("providerID %q → %q, want the same deterministic name", id, p.Status.ProviderID)
	}
	if e.calls(provider.OpDelete) < 1 {
		t.Errorf("old instance never deleted; calls %s", opsString(e.fake.Calls()))
	}
	if want := controller.SpecHash(&p.Spec, "v2", nil); p.Annotations[crawlv1alpha1.SpecHashAnnotation] != want {
		t.Errorf("annotation not updated to the v2 hash")
	}
}

// An unlabelled Secret is invisible to the operator: CloudInitError with
// backoff and no instance, until the label is added (which the labelled-only
// Secret watch sees as the Secret appearing).
func TestCloudInitUnlabelledSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.create(e.secret("plain", false, map[string]string{"cfg": "boot"}))
	e.create(e.withSecretRef("unl", "plain", "cfg"))
	p := e.waitCondition("unl", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonCloudInitError)
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if !strings.Contains(c.Message, crawlv1alpha1.CloudInitSecretLabel) {
		t.Errorf("message %q should tell the user about the label", c.Message)
	}
	if p.Status.Phase != crawlv1alpha1.PhasePending {
		t.Errorf("phase = %q, want Pending", p.Status.Phase)
	}
	e.waitEvent("unl", corev1.EventTypeWarning, controller.EventReasonCloudInitError)
	if n := e.calls(provider.OpCreate); n != 0 {
		t.Fatalf("create calls = %d without cloud-init, want 0", n)
	}

	var s corev1.Secret
	if err := e.c.Get(context.Background(), e.key("plain"), &s); err != nil {
		t.Fatal(err)
	}
	s.Labels = map[string]string{crawlv1alpha1.CloudInitSecretLabel: "true"}
	if err := e.c.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	p = e.waitProvisioned("unl")
	if got := e.createdCloudInit(p); got != "boot" {
		t.Errorf("cloud-init = %q, want boot (custom key)", got)
	}
}

// A missing Secret is CloudInitError; creating it (labelled) proceeds.
func TestCloudInitMissingSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.create(e.withSecretRef("miss", "later", ""))
	e.waitCondition("miss", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, crawlv1alpha1.ReasonCloudInitError)
	e.waitEvent("miss", corev1.EventTypeWarning, controller.EventReasonCloudInitError)

	// A Secret with the label but without the key is still an error.
	e.create(e.secret("later", true, map[string]string{"other": "x"}))
	e.waitProxy("miss", "missing-key message", func(p *crawlv1alpha1.Proxy) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == crawlv1alpha1.ReasonCloudInitError && strings.Contains(c.Message, `key "userData" not present`)
	})
	if n := e.calls(provider.OpCreate); n != 0 {
		t.Fatalf("create calls = %d, want 0", n)
	}

	var s corev1.Secret
	if err := e.c.Get(context.Background(), e.key("later"), &s); err != nil {
		t.Fatal(err)
	}
	s.Data["userData"] = []byte("now")
	if err := e.c.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	p := e.waitProvisioned("miss")
	if got := e.createdCloudInit(p); got != "now" {
		t.Errorf("cloud-init = %q, want now", got)
	}
}
