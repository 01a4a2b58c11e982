package gateway

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// checkPipes: every pipe the relay took is back (none held once the relay
// returned), and the relay spliced (opened a pipe) exactly when it should.
func checkPipes(t *testing.T, r *relayer, spliced bool) {
	t.Helper()
	if n := r.pipes.inUse(); n != 0 {
		t.Errorf("%d pipes still taken after the relay returned", n)
	}
	r.pipes.mu.Lock()
	opened := r.pipes.open > 0
	r.pipes.mu.Unlock()
	if opened != spliced {
		t.Errorf("the relay opened a pipe: %v, want %v", opened, spliced)
	}
}

// TestRelayHoldsNoPipeWhileIdle: between chunks a tunnel holds no pipe (the
// pool bounds pipes, not tunnels); a tunnel whose receiver goes away ends and
// gives back every pipe it took.
func TestRelayHoldsNoPipeWhileIdle(t *testing.T) {
	sender, src := tcpPair(t)
	dst, receiver := tcpPair(t)
	r := newRelayer()
	t.Cleanup(r.close)
	relayed := make(chan int64, 1)
	go func() { relayed <- r.copy(dst, src) }()

	chunk := bytes.Repeat([]byte("x"), 100<<10)
	if _, err := sender.Write(chunk); err != nil {
		t.Fatal(err)
	}
	_ = receiver.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(receiver, make([]byte, len(chunk))); err != nil {
		t.Fatalf("reading the first chunk: %v", err)
	}
	// The relay now waits for src: it must hold nothing.
	deadline := time.Now().Add(5 * time.Second)
	for r.pipes.inUse() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := r.pipes.inUse(); n != 0 {
		t.Fatalf("an idle tunnel holds %d pipes", n)
	}
	r.pipes.mu.Lock()
	free := len(r.pipes.free)
	r.pipes.mu.Unlock()
	if free != 1 {
		t.Fatalf("%d free pipes after one chunk, want the one it used kept", free)
	}

	// The receiver leaves; the sender keeps sending until the relay gives up.
	receiver.Close()
	dst.(*net.TCPConn).SetLinger(0)
	go func() {
		for range 64 {
			if _, err := sender.Write(chunk); err != nil {
				return
			}
		}
	}()
	select {
	case <-relayed:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not end after its receiver left")
	}
	if n := r.pipes.inUse(); n != 0 {
		t.Errorf("%d pipes still taken after the relay ended", n)
	}
}
