package serving

import (
	"context"
	"errors"
	"testing"
	"time"
)

// server is a Runnable that runs until its context ends, recording that.
type server struct {
	started, ended chan struct{}
	err            error
	leaderElected  *bool
}

func newServer() *server { return &server{started: make(chan struct{}), ended: make(chan struct{})} }

func (s *server) Start(ctx context.Context) error {
	close(s.started)
	if s.err != nil {
		close(s.ended)
		return s.err
	}
	<-ctx.Done()
	close(s.ended)
	return nil
}

type electedServer struct{ *server }

func (s electedServer) NeedLeaderElection() bool { return *s.leaderElected }

// ended reports whether s's context ended within d.
func endedWithin(s *server, d time.Duration) bool {
	select {
	case <-s.ended:
		return true
	case <-time.After(d):
		return false
	}
}

// startHeld starts a server held by l, as the manager would; cancel is the
// manager's stop, done receives Start's return.
func startHeld(l *Labeller) (s *server, cancel context.CancelFunc, done <-chan error) {
	s = newServer()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { errs <- l.Hold(s).Start(ctx) }()
	<-s.started
	return s, cancel, errs
}

func TestHoldStopsTheServerOnlyAfterSteppingOut(t *testing.T) {
	l := &Labeller{stepped: make(chan struct{})}
	s, cancel, done := startHeld(l)
	cancel()
	if endedWithin(s, 200*time.Millisecond) {
		t.Fatal("the server's context ended before the labeller stepped out")
	}
	close(l.stepped)
	if !endedWithin(s, 5*time.Second) {
		t.Fatal("the server's context did not end once the labeller stepped out")
	}
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func TestHoldDoesNotStopTheServerBeforeItsContextEnds(t *testing.T) {
	l := &Labeller{stepped: make(chan struct{})}
	close(l.stepped) // a labeller that returned early (it could not start)
	s, cancel, done := startHeld(l)
	if endedWithin(s, 200*time.Millisecond) {
		t.Fatal("the server stopped while the manager still ran")
	}
	cancel()
	if !endedWithin(s, 5*time.Second) {
		t.Fatal("the server's context did not end with the manager's")
	}
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func TestHoldReturnsTheServersError(t *testing.T) {
	l := &Labeller{stepped: make(chan struct{})}
	s := newServer()
	s.err = errors.New("listen: address in use")
	if err := l.Hold(s).Start(context.Background()); !errors.Is(err, s.err) {
		t.Fatalf("Start = %v, want %v", err, s.err)
	}
}

func TestHoldKeepsLeaderElection(t *testing.T) {
	l := &Labeller{stepped: make(chan struct{})}
	for _, want := range []bool{false, true} {
		if got := l.Hold(electedServer{&server{leaderElected: &want}}).NeedLeaderElection(); got != want {
			t.Errorf("NeedLeaderElection of a server that says %v = %v", want, got)
		}
	}
	if !l.Hold(newServer()).NeedLeaderElection() {
		t.Error("a server that does not say is leader-elected (controller-runtime's default)")
	}
}
