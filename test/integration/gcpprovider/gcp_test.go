package gcpprovider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxy-operator/proxy-operator/apis/crawl/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/provider/gcp"
	"github.com/proxy-operator/proxy-operator/test/gcefake"
	"github.com/proxy-operator/proxy-operator/test/nodeagent"
)

// TestCreateReadyThroughSquid: a gcp Proxy becomes Ready at its VM's natIP,
// probed through the Squid behind it, and that address forwards requests.
func TestCreateReadyThroughSquid(t *testing.T) {
	p := newProxy("create-ready", "us-central1-a", "e2-small")
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	insts := instances(p)
	if len(insts) != 1 {
		t.Fatalf("instances of %s: %d, want 1", p.Name, len(insts))
	}
	in := insts[0]
	if want := gcp.ProviderID(project, "", "us-central1-a", in.Name); p.Status.ProviderID != want {
		t.Errorf("providerID %q, want %q", p.Status.ProviderID, want)
	}
	if in.Status != gcefake.StatusRunning || in.NatIP == "" || p.Status.IP != in.NatIP {
		t.Errorf("instance %s %s natIP %q, proxy IP %q: want RUNNING at the proxy's IP", in.Name, in.Status, in.NatIP, p.Status.IP)
	}
	// The installation's own tag (derived: provider.InstallationTag).
	if !regexp.MustCompile(`^proxy-operator-[0-9a-f]{12}$`).MatchString(in.Labels[gcp.LabelTag]) || in.Labels[gcp.LabelOwnerUID] != string(p.UID) {
		t.Errorf("ownership labels %v", in.Labels)
	}
	throughProxy(t, p)
}

// TestMachineTypeEditReplaces: a machineType edit deletes the VM, waits until
// Get answers 404, and only then inserts the replacement of the same name.
func TestMachineTypeEditReplaces(t *testing.T) {
	p := newProxy("machine-edit", "us-central1-b", "e2-small")
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	name := instanceName(p)
	p.Spec.GCP.MachineType = "e2-medium"
	if err := shared.client.Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replacement with e2-medium Ready", timeout, func() (bool, string) {
		p = get(t, p.Name)
		insts := instances(p)
		ok := len(insts) == 1 && strings.HasSuffix(insts[0].MachineType, "/e2-medium") &&
			p.Status.Phase == crawlv1alpha1.PhaseReady && p.Status.ObservedGeneration == p.Generation
		return ok, describe(p)
	})
	// Order of the calls on that name: after the delete, a 404 from Get
	// before any further insert (inserts carry the name in the body, so
	// count them by zone instead).
	var sawDelete, saw404 bool
	for _, c := range shared.fake.Calls() {
		switch {
		case c.Name == name && c.Op == gcefake.OpDelete:
			sawDelete = true
		case c.Name == name && c.Op == gcefake.OpGet && c.Code == 404 && sawDelete:
			saw404 = true
		case c.Op == gcefake.OpInsert && c.Zone == "us-central1-b" && sawDelete && !saw404:
			t.Fatalf("an insert in the zone was sent after the delete and before Get answered 404: %+v", c)
		}
	}
	if !sawDelete || !saw404 {
		t.Errorf("replacement calls: delete %v, 404 after it %v; want both", sawDelete, saw404)
	}
	throughProxy(t, p)
}

// TestZoneEditDeletesOldZone: moving a Proxy to another zone deletes the VM
// in the old zone and creates it in the new one.
func TestZoneEditDeletesOldZone(t *testing.T) {
	p := newProxy("zone-edit", "us-central1-a", "e2-small")
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	p.Spec.GCP.Zone = "europe-west1-b"
	if err := shared.client.Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the instance moved to europe-west1-b", timeout, func() (bool, string) {
		p = get(t, p.Name)
		insts := instances(p)
		var zones []string
		for _, in := range insts {
			zones = append(zones, in.Zone)
		}
		return slices.Equal(zones, []string{"europe-west1-b"}) && p.Status.Phase == crawlv1alpha1.PhaseReady &&
			p.Status.ObservedGeneration == p.Generation && strings.HasPrefix(p.Status.ProviderID, "zones/europe-west1-b/"), fmt.Sprintf("zones %v; %s", zones, describe(p))
	})
}

// TestSecretRotationReplaces: a new cloud-init in the referenced Secret
// replaces the VM, whose metadata then carries the new user-data.
func TestSecretRotationReplaces(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-init-rotate", Namespace: namespace,
			Labels: map[string]string{crawlv1alpha1.CloudInitSecretLabel: "true"}},
		StringData: map[string]string{"userData": "#cloud-config\n# v1\n"},
	}
	if err := shared.client.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	p := newProxy("secret-rotate", "us-east1-b", "e2-small")
	p.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: secret.Name}}
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	if got := userData(p); !strings.Contains(got, "# v1") {
		t.Fatalf("user-data before rotation = %q", got)
	}
	secret.StringData = map[string]string{"userData": "#cloud-config\n# v2\n"}
	if err := shared.client.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replacement with the rotated cloud-init Ready", timeout, func() (bool, string) {
		p = get(t, p.Name)
		return strings.Contains(userData(p), "# v2") && p.Status.Phase == crawlv1alpha1.PhaseReady, describe(p)
	})
}

func userData(p *crawlv1alpha1.Proxy) string {
	insts := instances(p)
	if len(insts) != 1 {
		return fmt.Sprintf("<%d instances>", len(insts))
	}
	for _, it := range insts[0].Instance.GetMetadata().GetItems() {
		if it.GetKey() == gcp.MetadataUserData {
			return it.GetValue()
		}
	}
	return ""
}

// TestQuotaWaitsNeverFails: exhausted quota shows as QuotaExceeded and is
// retried every quota interval, not on the backoff curve, never Failed.
func TestQuotaWaitsNeverFails(t *testing.T) {
	const zone = "us-central1-c"
	shared.fake.Inject(gcefake.Fault{Op: gcefake.OpInsert, Zone: zone, Code: 403, Reason: "quotaExceeded"})
	p := newProxy("quota", zone, "e2-small")
	create(t, p)
	eventually(t, "Provisioned=False/QuotaExceeded", timeout, func() (bool, string) {
		p = get(t, p.Name)
		c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == crawlv1alpha1.ReasonQuotaExceeded, describe(p)
	})
	first := inserts(zone, 403)
	time.Sleep(2*quotaRetry + quotaRetry/2)
	p = get(t, p.Name)
	if p.Status.Phase == crawlv1alpha1.PhaseFailed {
		t.Fatalf("quota made the proxy Failed: %s", describe(p))
	}
	// 2.5 quota intervals: at most 3 more attempts; a backoff loop makes
	// far more.
	if n := inserts(zone, 403) - first; n < 1 || n > 3 {
		t.Errorf("%d inserts during %s of quota wait (retry every %s), want 1..3", n, 2*quotaRetry+quotaRetry/2, quotaRetry)
	}
	shared.fake.ClearFaults()
	waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
}

// TestPermanentLatchesUntilEdit: an invalid request fails the Proxy for its
// generation (no more inserts); a spec edit retries and succeeds.
func TestPermanentLatchesUntilEdit(t *testing.T) {
	const zone = "us-east1-c"
	shared.fake.Inject(gcefake.Fault{Op: gcefake.OpInsert, Zone: zone, Code: 400, Reason: "invalid",
		Message: "Invalid value for field 'resource.machineType': 'zones/us-east1-c/machineTypes/e2-bogus'. Machine type with name 'e2-bogus' does not exist in zone 'us-east1-c'."})
	p := newProxy("permanent", zone, "e2-bogus")
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseFailed)
	c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned)
	if c == nil || !strings.Contains(c.Message, "e2-bogus") {
		t.Errorf("Provisioned condition %+v: want the API's message", c)
	}
	before := inserts(zone, 400)
	time.Sleep(2 * time.Second)
	if n := inserts(zone, 400) - before; n != 0 {
		t.Errorf("%d inserts after a permanent failure, want 0 (latched for the generation)", n)
	}
	shared.fake.ClearFaults()
	p.Spec.GCP.MachineType = "e2-small"
	if err := shared.client.Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
}

// TestTransientBacksOffThenReady: 5xx answers are retried with backoff until
// the API recovers.
func TestTransientBacksOffThenReady(t *testing.T) {
	const zone = "us-west1-a"
	shared.fake.Inject(gcefake.Fault{Op: gcefake.OpInsert, Zone: zone, Code: 503, Reason: "backendError", Times: 3})
	p := newProxy("transient", zone, "e2-small")
	create(t, p)
	waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	if n := inserts(zone, 503); n != 3 {
		t.Errorf("%d failed inserts, want the 3 injected", n)
	}
	if n := inserts(zone, 200); n != 1 {
		t.Errorf("%d accepted inserts, want 1", n)
	}
}

// TestAcceptedThenVanishedRecreatesOnce: an insert Compute Engine accepts and
// fails later is seen as a vanished instance: a Warning Event and
// CreateFailed, one new insert after the backoff, one instance in the end.
func TestAcceptedThenVanishedRecreatesOnce(t *testing.T) {
	const zone = "us-west1-b"
	shared.fake.Inject(gcefake.Fault{Op: gcefake.OpInsert, Zone: zone, Vanish: true, Times: 1})
	p := newProxy("vanish", zone, "e2-small")
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	if got := events(t, p.Name); !slices.Contains(got, corev1.EventTypeWarning+"/"+crawlv1alpha1.ReasonCreateFailed) {
		t.Errorf("events %v: want a Warning CreateFailed", got)
	}
	if n := inserts(zone, 200); n != 2 {
		t.Errorf("%d accepted inserts, want 2 (the vanished one and its one re-creation)", n)
	}
	if insts := instances(p); len(insts) != 1 {
		t.Errorf("%d instances, want exactly 1", len(insts))
	}
}

// TestDeleteRemovesInstance: deleting the Proxy deletes its VM (and its
// Squid) before the finalizer goes.
func TestDeleteRemovesInstance(t *testing.T) {
	p := newProxy("delete", "europe-west1-b", "e2-small")
	create(t, p)
	p = waitPhase(t, p.Name, crawlv1alpha1.PhaseReady)
	ip := p.Status.IP
	deleteAndWait(t, p.Name)
	if left := instances(p); len(left) != 0 {
		t.Fatalf("instances left: %+v", left)
	}
	// The VM's Squid is gone with it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil && !nodeagent.PortFree(ip+":3128") {
		time.Sleep(100 * time.Millisecond)
	}
	if !nodeagent.PortFree(ip + ":3128") {
		t.Errorf("squid of the deleted VM still listens on %s:3128", ip)
	}
}
