package bootstrap

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/test/controlplane"
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

type env struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func setup(t *testing.T) *env {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{SkipCRDs: true})
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &env{kube: kube, dyn: dyn}
}

func (e *env) namespace(t *testing.T, name string) string {
	t.Helper()
	if _, err := e.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// apiService registers an APIService with no caBundle (nothing serves it;
// only its spec matters here).
func (e *env) apiService(t *testing.T, group string) string {
	t.Helper()
	name := "v1alpha1." + group
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"group": group, "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"name": "nothing", "namespace": "default", "port": int64(443)}},
	}}
	if _, err := e.dyn.Resource(apiServiceGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func (e *env) caBundle(t *testing.T, name string) []byte {
	t.Helper()
	u, err := e.dyn.Resource(apiServiceGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// countingListener counts serving-certificate change notifications.
type countingListener struct{ n atomic.Int32 }

func (l *countingListener) Enqueue() { l.n.Add(1) }

func verify(t *testing.T, certPEM, bundle []byte, host string, now time.Time) error {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("bundle holds no certificate")
	}
	all, err := certs.ParseCertificates(certPEM)
	if err != nil || len(all) == 0 {
		t.Fatalf("serving certificate: %v", err)
	}
	_, err = all[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now})
	return err
}

// TestServingCertificate: the first Ensure creates the Secret, the CA
// ConfigMap and the APIService's caBundle; a second replica reuses them
// (the Secret is not written again); the renewal loop renews the serving
// certificate when it falls due and the CA when it does, keeping the old CA
// in the bundle, and tells listeners; a Secret edited into garbage is
// reissued.
func TestServingCertificate(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	ns := e.namespace(t, "operator")
	apiSvc := e.apiService(t, "certs.example.com")
	clk := clocktesting.NewFakeClock(time.Now())
	opts := certs.DefaultOptions()
	opts.SecretName, opts.Namespace, opts.APIService = "serving", ns, apiSvc
	opts.Services = []string{"proxy-lease-api"}
	opts.CAValidity, opts.CertValidity = 300*24*time.Hour, 30*24*time.Hour
	newManager := func() *certs.Manager {
		m, err := certs.NewManager(opts, certs.Deps{Kube: e.kube, Dynamic: e.dyn, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	host := "proxy-lease-api." + ns + ".svc"

	first := newManager()
	if c, _ := first.CurrentCertKeyContent(); c != nil {
		t.Fatal("a certificate before Ensure")
	}
	if err := first.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	secret, err := e.kube.CoreV1().Secrets(ns).Get(ctx, "serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _ := first.CurrentCertKeyContent()
	if !bytes.Equal(certPEM, secret.Data[certs.KeyServingCert]) {
		t.Error("the served certificate is not the Secret's")
	}
	if secret.Type != corev1.SecretTypeTLS || secret.Labels[certs.ManagedByLabel] != "proxy-operator" {
		t.Errorf("Secret type %s labels %v", secret.Type, secret.Labels)
	}
	bundle := first.CABundle()
	if !bytes.Equal(e.caBundle(t, apiSvc), bundle) {
		t.Error("APIService caBundle is not the manager's CA bundle")
	}
	cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(ctx, certs.DefaultCAConfigMap, metav1.GetOptions{})
	if err != nil || cm.Data[certs.KeyCAConfigMap] != string(bundle) {
		t.Fatalf("CA ConfigMap: %v", err)
	}
	if err := verify(t, certPEM, bundle, host, clk.Now()); err != nil {
		t.Errorf("serving certificate for %s: %v", host, err)
	}

	// A second replica reads what the first wrote and writes nothing.
	second := newManager()
	if err := second.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	again, _ := e.kube.CoreV1().Secrets(ns).Get(ctx, "serving", metav1.GetOptions{})
	if again.ResourceVersion != secret.ResourceVersion {
		t.Error("a second replica rewrote a current Secret")
	}
	if c, _ := second.CurrentCertKeyContent(); !bytes.Equal(c, certPEM) {
		t.Error("the two replicas serve different certificates")
	}

	// The renewal loop, on the fake clock.
	listener := &countingListener{}
	first.AddListener(listener)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Start(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	servingCert, err := certs.ParseCertificates(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	life := servingCert[0].NotAfter.Sub(servingCert[0].NotBefore)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Wait for the loop to arm its timer before stepping the clock.
	waitFor("the renewal loop waiting", func() bool { return clk.HasWaiters() })
	clk.SetTime(servingCert[0].NotBefore.Add(life*2/3 + time.Minute))
	waitFor("the serving certificate renewed", func() bool {
		c, _ := first.CurrentCertKeyContent()
		return !bytes.Equal(c, certPEM)
	})
	if listener.n.Load() == 0 {
		t.Error("no listener told of the renewed certificate")
	}
	renewed, _ := first.CurrentCertKeyContent()
	if !bytes.Equal(first.CABundle(), bundle) {
		t.Error("renewing the serving certificate changed the CA")
	}
	if err := verify(t, renewed, bundle, host, clk.Now()); err != nil {
		t.Errorf("renewed serving certificate: %v", err)
	}
	stored, _ := e.kube.CoreV1().Secrets(ns).Get(ctx, "serving", metav1.GetOptions{})
	if !bytes.Equal(stored.Data[certs.KeyServingCert], renewed) {
		t.Error("the renewal was not written to the Secret")
	}

	// The CA falls due: a new CA, the old one still in the bundle and the
	// APIService's caBundle.
	caCerts, _ := certs.ParseCertificates(bundle)
	caLife := caCerts[0].NotAfter.Sub(caCerts[0].NotBefore)
	waitFor("the renewal loop waiting", func() bool { return clk.HasWaiters() })
	clk.SetTime(caCerts[0].NotBefore.Add(caLife*2/3 + time.Minute))
	waitFor("the CA renewed", func() bool { return !bytes.Equal(first.CABundle(), bundle) })
	newBundle, _ := certs.ParseCertificates(first.CABundle())
	if len(newBundle) != 2 || !newBundle[1].Equal(caCerts[0]) {
		t.Fatalf("bundle after the CA renewal holds %d certificates, want the new CA and the old", len(newBundle))
	}
	waitFor("APIService caBundle follows", func() bool { return bytes.Equal(e.caBundle(t, apiSvc), first.CABundle()) })
	// The second replica picks the renewal up from the Secret.
	if err := second.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	c1, _ := first.CurrentCertKeyContent()
	if c2, _ := second.CurrentCertKeyContent(); !bytes.Equal(c1, c2) {
		t.Error("the second replica did not take the renewed certificate from the Secret")
	}

	// Garbage in the Secret: reissued, not served.
	stored, _ = e.kube.CoreV1().Secrets(ns).Get(ctx, "serving", metav1.GetOptions{})
	stored.Data[certs.KeyServingKey] = []byte("garbage")
	if _, err := e.kube.CoreV1().Secrets(ns).Update(ctx, stored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := second.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	fixed, _ := e.kube.CoreV1().Secrets(ns).Get(ctx, "serving", metav1.GetOptions{})
	if _, err := certs.ParseKeyPair(fixed.Data[certs.KeyServingCert], fixed.Data[certs.KeyServingKey]); err != nil {
		t.Errorf("after a garbage edit the Secret is still unusable: %v", err)
	}
}

// TestManagerErrorsAreClear: a missing namespace is an error with the
// API's reason, not a silent success.
func TestManagerErrorsAreClear(t *testing.T) {
	e := setup(t)
	opts := certs.DefaultOptions()
	opts.SecretName, opts.Namespace, opts.APIService = "serving", "does-not-exist", ""
	m, err := certs.NewManager(opts, certs.Deps{Kube: e.kube})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Ensure(context.Background())
	if !apierrors.IsNotFound(err) {
		t.Fatalf("Ensure in a missing namespace: %v, want NotFound", err)
	}
	if c, _ := m.CurrentCertKeyContent(); c != nil {
		t.Error("a failed Ensure left a certificate to serve")
	}
}
