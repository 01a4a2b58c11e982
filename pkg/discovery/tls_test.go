package discovery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/certs"
	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// writePair issues a serving pair for 127.0.0.1 from a new CA, writes it to
// dir/tls.crt and dir/tls.key and returns the CA.
func writePair(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue([]string{"127.0.0.1", "localhost"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The key first: a reader between the two writes sees a mismatched
	// pair, which the file controller rejects and retries.
	for name, b := range map[string][]byte{"tls.key": kp.KeyPEM, "tls.crt": kp.CertPEM} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return ca.Cert
}

func clientFor(ca *x509.Certificate, maxVersion uint16) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MaxVersion: maxVersion},
		DisableKeepAlives: true,
	}}
}

// TestServeTLSFromFiles: the API serves the files' certificate over TLS 1.2+
// only, refuses plain HTTP on that port, and serves a renewed pair written
// over the files without a restart.
func TestServeTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	ca1 := writePair(t, dir)
	o := DefaultServingOptions()
	o.TLSCertFile, o.TLSKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cert, err := o.ServingCert(nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := &logSink{}
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), funcr.New(sink.add, funcr.Options{})))
	defer cancel()
	store, _ := lease.New(lease.Options{}, nil)
	s, err := New(Options{Tokens: SingleToken("t"), Service: realService(t, store), Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	base := "https://" + ln.Addr().String()

	get := func(c *http.Client, url string) (int, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if code, err := get(clientFor(ca1, 0), base+"/healthz"); err != nil || code != 200 {
		t.Fatalf("healthz over TLS: %d %v", code, err)
	}
	if sink.contains("plain HTTP") {
		t.Error("a TLS server warned about plain HTTP")
	}
	if _, err := get(clientFor(ca1, tls.VersionTLS11), base+"/healthz"); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	if code, err := get(&http.Client{Timeout: 5 * time.Second}, "http://"+ln.Addr().String()+"/healthz"); err == nil && code != http.StatusBadRequest {
		t.Errorf("plain HTTP on the TLS port answered %d", code)
	}

	ca2 := writePair(t, dir)
	deadline := time.Now().Add(90 * time.Second) // fsnotify, else the controller's one-minute resync
	for {
		_, err := get(clientFor(ca2, 0), base+"/healthz")
		if err == nil {
			break
		}
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) && !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("healthz while waiting for the renewed certificate: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the renewed certificate was not served within 90s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := get(clientFor(ca1, 0), base+"/healthz"); err == nil {
		t.Error("the old CA still verifies after the files changed")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestPlainHTTPWarns: plain HTTP is served only when asked for, and says so.
func TestPlainHTTPWarns(t *testing.T) {
	sink := &logSink{}
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), funcr.New(sink.add, funcr.Options{})))
	store, _ := lease.New(lease.Options{}, nil)
	s, err := New(Options{Tokens: SingleToken("t"), Service: realService(t, store)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	<-done
	if !sink.contains("WARNING: discovery API serves plain HTTP") {
		t.Errorf("no plain-HTTP warning in %q", sink.lines)
	}
}

func TestServingCertChoice(t *testing.T) {
	dir := t.TempDir()
	writePair(t, dir)
	managed := &staticCert{}
	for _, tc := range []struct {
		name        string
		opts        func(*ServingOptions)
		managed     bool
		wantSource  string // "files", "managed", "plain"
		wantErr     error
		wantInvalid string
	}{
		{name: "files win over the managed certificate", opts: func(o *ServingOptions) {
			o.TLSCertFile, o.TLSKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		}, managed: true, wantSource: "files"},
		{name: "managed certificate", opts: func(*ServingOptions) {}, managed: true, wantSource: "managed"},
		{name: "plain HTTP asked for", opts: func(o *ServingOptions) { o.PlainHTTP = true }, managed: true, wantSource: "plain"},
		{name: "nothing: refused", opts: func(*ServingOptions) {}, wantErr: ErrNoServingCert},
		{name: "disabled API needs nothing", opts: func(o *ServingOptions) { o.Addr = "0" }},
		{name: "certificate without key", opts: func(o *ServingOptions) { o.TLSCertFile = filepath.Join(dir, "tls.crt") },
			wantInvalid: "give both or neither"},
		{name: "plain and files", opts: func(o *ServingOptions) {
			o.PlainHTTP, o.TLSCertFile, o.TLSKeyFile = true, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		}, wantInvalid: "conflicts with --discovery-tls-cert-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultServingOptions()
			tc.opts(&o)
			if err := o.Validate(); tc.wantInvalid != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantInvalid) {
					t.Fatalf("Validate = %v, want %q", err, tc.wantInvalid)
				}
				return
			} else if err != nil {
				t.Fatal(err)
			}
			if err := o.ValidateTLS(tc.managed); !errors.Is(err, tc.wantErr) {
				t.Fatalf("ValidateTLS = %v, want %v", err, tc.wantErr)
			}
			if tc.wantSource == "" {
				return
			}
			var m *staticCert
			if tc.managed {
				m = managed
			}
			got, err := o.ServingCert(providerOrNil(m))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ServingCert error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			source := "plain"
			switch {
			case got == nil:
			case got == providerOrNil(managed):
				source = "managed"
			default:
				if c, _ := got.CurrentCertKeyContent(); len(c) == 0 {
					t.Error("file source holds no certificate")
				}
				source = "files"
			}
			if source != tc.wantSource {
				t.Errorf("source = %s, want %s", source, tc.wantSource)
			}
		})
	}
}

// TestStandbyAnswers503NamingTheLeader: a replica whose lease gate is closed
// answers every lease endpoint, and the fleet listing (whose activeLeases
// a standby cannot know), 503 not_leader with the leader and Retry-After;
// its health check still answers.
func TestStandbyAnswers503NamingTheLeader(t *testing.T) {
	store, _ := lease.New(lease.Options{}, nil)
	l := leasing.NewWithStore(store, leasing.DefaultOptions(), clock.RealClock{})
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	l.Gate = leasing.NewGate(func(context.Context) string { return "operator-1_x" })
	svc, err := l.Service(leasing.APIHTTP, DefaultMaxWait, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Tokens: SingleToken("t"), Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, rq := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/leases", `{}`},
		{http.MethodGet, "/v1/leases/abc", ""},
		{http.MethodDelete, "/v1/leases/abc", ""},
		{http.MethodPost, "/v1/leases/abc/renew", `{}`},
		{http.MethodPost, "/v1/leases/abc/report", `{"result":"ok"}`},
		{http.MethodGet, "/v1/proxies", ""},
	} {
		req, _ := http.NewRequest(rq.method, ts.URL+rq.path, strings.NewReader(rq.body))
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body wire.Error
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || body.Error != wire.CodeNotLeader || body.Leader != "operator-1_x" || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s %s on a standby: %d %+v Retry-After %q", rq.method, rq.path, resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
		if !resp.Close {
			t.Errorf("%s %s on a standby kept the connection: the client would keep coming back here", rq.method, rq.path)
		}
	}
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health check on a standby: %d, want 200", resp.StatusCode)
	}
}
