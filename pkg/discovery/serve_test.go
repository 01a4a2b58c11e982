package discovery

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logSink) contains(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			return true
		}
	}
	return false
}

// TestServeLifecycle: Serve answers on a real loopback listener, logs the
// auth warning only when auth is off, logs requests through the context
// logger, and returns nil after a graceful shutdown.
func TestServeLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tokens      Tokens
		wantWarning bool
	}{
		{"auth off", nil, true},
		{"auth on", SingleToken("t"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &logSink{}
			logger := funcr.New(sink.add, funcr.Options{Verbosity: 1})
			store, _ := lease.New(lease.Options{}, nil)
			s, err := New(Options{Tokens: tc.tokens, Service: realService(t, store)})
			if err != nil {
				t.Fatal(err)
			}
			if s.NeedLeaderElection() {
				t.Error("discovery must not be leader-elected")
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
			done := make(chan error, 1)
			go func() { done <- s.Serve(ctx, ln) }()

			resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("healthz %d", resp.StatusCode)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve returned %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after cancel")
			}
			if got := sink.contains("WARNING: discovery API authentication is DISABLED"); got != tc.wantWarning {
				t.Errorf("auth warning logged = %v, want %v; logs %q", got, tc.wantWarning, sink.lines)
			}
			if !sink.contains(`"path"="/healthz"`) {
				t.Errorf("request not logged: %q", sink.lines)
			}
		})
	}
}

func TestStartFailsOnBusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	store, _ := lease.New(lease.Options{}, nil)
	s, _ := New(Options{Addr: ln.Addr().String(), Service: realService(t, store)})
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "listening") {
		t.Errorf("Start on a busy address: %v", err)
	}
}
