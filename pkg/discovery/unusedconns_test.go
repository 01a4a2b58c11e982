package discovery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// shutdownBound is well under net/http's 5 s rule for connections on which
// no request began, and well over unusedAge, after which the server closes
// them.
const shutdownBound = 3 * time.Second

// TestShutdownClosesSilentUnusedConnections: a client connection on which no
// request began (a pooled connection a transport dialed and did not use; over
// TLS, one whose handshake is done) does not hold the server's shutdown.
func TestShutdownClosesSilentUnusedConnections(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := "http"
		if useTLS {
			name = "https"
		}
		t.Run(name, func(t *testing.T) {
			store, _ := lease.New(lease.Options{}, nil)
			o := Options{Service: realService(t, store)}
			var roots *x509.CertPool
			if useTLS {
				dir := t.TempDir()
				ca := writePair(t, dir)
				so := DefaultServingOptions()
				so.TLSCertFile, so.TLSKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
				cert, err := so.ServingCert(nil)
				if err != nil {
					t.Fatal(err)
				}
				o.Cert = cert
				roots = x509.NewCertPool()
				roots.AddCert(ca)
			}
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Serve(ctx, ln) }()
			addr := ln.Addr().String()

			// The silent connection: connected (and over TLS, handshaken),
			// nothing sent.
			silent := dialSilent(t, addr, roots)
			time.Sleep(100 * time.Millisecond) // accepted
			cancel()
			stopped := time.Now()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(shutdownBound):
				t.Fatalf("Serve still shutting down %v after cancel: it waits for the unused connection", shutdownBound)
			}
			t.Logf("shut down in %v", time.Since(stopped).Round(time.Millisecond))
			// The silent connection was closed by the server.
			_ = silent.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := silent.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
				t.Errorf("the silent connection after shutdown: read %v, want it closed", err)
			}
		})
	}
}

// TestPlainServerWaitsForSilentConnections is the negative control: without
// the tracker, net/http's Shutdown holds for the same silent connection past
// shutdownBound, so the test above would catch a server that lost it.
func TestPlainServerWaitsForSilentConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go func() { _ = srv.Serve(ln) }()
	silent := dialSilent(t, ln.Addr().String(), nil)
	defer silent.Close()
	time.Sleep(100 * time.Millisecond) // accepted
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBound)
	defer cancel()
	if err := srv.Shutdown(ctx); err == nil {
		t.Fatalf("net/http's Shutdown returned within %v with a silent connection open: the test above proves nothing", shutdownBound)
	}
	_ = srv.Close()
}

func dialSilent(t *testing.T, addr string, roots *x509.CertPool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if roots == nil {
		return c
	}
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// TestCloseSilent: only a connection unused for unusedAge with nothing
// waiting to be read is closed; one that began a request is forgotten.
func TestCloseSilent(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	now := t0
	u := newUnusedConns(func() time.Time { return now })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// accept returns the server's side of a new connection and the client's.
	accept := func() (server, client net.Conn) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return server, client
	}
	silentOld, silentOldClient := accept()
	u.track(silentOld, http.StateNew)
	pendingOld, pendingOldClient := accept()
	u.track(pendingOld, http.StateNew)
	if _, err := io.WriteString(pendingOldClient, "GET / HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	used, _ := accept()
	u.track(used, http.StateNew)
	u.track(used, http.StateActive)
	now = t0.Add(unusedAge / 2)
	silentYoung, _ := accept()
	u.track(silentYoung, http.StateNew)
	time.Sleep(50 * time.Millisecond) // the pending bytes arrive

	if got := u.closeSilent(); got != 0 {
		t.Fatalf("closeSilent before any connection is %v old closed %d, want 0", unusedAge, got)
	}
	now = t0.Add(unusedAge)
	if got := u.closeSilent(); got != 1 {
		t.Fatalf("closeSilent closed %d, want 1 (the old silent connection)", got)
	}
	_ = silentOldClient.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silentOldClient.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the old silent connection: read %v, want EOF (closed by the server)", err)
	}
	for name, c := range map[string]net.Conn{"with bytes waiting": pendingOld, "young": silentYoung, "used": used} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			t.Errorf("the %s connection was closed: %v", name, err)
		}
	}
	if got, want := u.n.Load(), int64(2); got != want {
		t.Errorf("tracking %d connections, want %d (the young one and the one with bytes waiting)", got, want)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
