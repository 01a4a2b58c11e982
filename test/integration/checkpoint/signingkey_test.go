package checkpoint

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leaseid"
)

// The signing key is made once and then shared: every replica (and every
// restart) reads the same key; a Secret without a usable key is refused
// with its name, not replaced (that would orphan every signed lease).
func TestSigningKeySecret(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	first, err := leaseid.EnsureKey(ctx, e.kube.CoreV1(), e.ns, "lease-key")
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != leaseid.KeySize {
		t.Fatalf("key of %d bytes", len(first))
	}
	again, err := leaseid.EnsureKey(ctx, e.kube.CoreV1(), e.ns, "lease-key")
	if err != nil || !bytes.Equal(first, again) {
		t.Fatalf("second replica's key differs (%v)", err)
	}
	// LoadKey gives a Signer that key: what it signs, one with the key verifies.
	loaded := leaseid.NewSigner()
	if err := loaded.LoadKey(ctx, e.kube.CoreV1(), leaseid.Options{SecretName: "lease-key", Namespace: e.ns}); err != nil {
		t.Fatal(err)
	}
	direct := leaseid.NewSigner()
	if err := direct.SetKey(first); err != nil {
		t.Fatal(err)
	}
	l := lease.Lease{Namespace: "crawl", Proxy: lease.ProxyInfo{Namespace: "crawl", Name: "p"}, Holder: "h", Flow: "h", AcquiredAt: time.Now(), TTL: time.Minute}
	if _, err := direct.Verify(loaded.NewID(&l)); err != nil {
		t.Errorf("an ID signed with the loaded key: %v", err)
	}
	// Control: another Secret name is another key.
	other, err := leaseid.EnsureKey(ctx, e.kube.CoreV1(), e.ns, "other-key")
	if err != nil || bytes.Equal(first, other) {
		t.Fatalf("two Secrets, one key (%v)", err)
	}
	s, err := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "lease-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data[leaseid.SecretKey] = []byte("short")
	if _, err := e.kube.CoreV1().Secrets(e.ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseid.EnsureKey(ctx, e.kube.CoreV1(), e.ns, "lease-key"); err == nil || !strings.Contains(err.Error(), e.ns+"/lease-key") {
		t.Errorf("a 5-byte key: %v, want an error naming the Secret", err)
	}
	if got, _ := e.kube.CoreV1().Secrets(e.ns).Get(ctx, "lease-key", metav1.GetOptions{}); string(got.Data[leaseid.SecretKey]) != "short" {
		t.Error("the unusable key was replaced")
	}
}
