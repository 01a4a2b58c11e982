package gateway

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestRelay relays a payload sent in bursts with pauses between them (so the
// relay both moves chunks back to back and waits for src to be readable) and
// ends dst's write side when src ends. Between sockets it splices through
// kernel pipes where it can, copies through a buffer when no pipe is free,
// and copies when a side is no syscall.Conn (net.Pipe): each must deliver
// the same bytes.
func TestRelay(t *testing.T) {
	payload := make([]byte, 3<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(payload)
	tcp := func(t *testing.T) (net.Conn, net.Conn, net.Conn, net.Conn) {
		sender, src := tcpPair(t)
		dst, receiver := tcpPair(t)
		return sender, src, dst, receiver
	}
	for _, tc := range []struct {
		name  string
		pipes int
		conns func(t *testing.T) (sender, src, dst, receiver net.Conn)
	}{
		{name: "tcp", pipes: maxPipes, conns: tcp},
		{name: "tcp, no pipe free", pipes: 0, conns: tcp},
		{name: "not a syscall.Conn", pipes: maxPipes, conns: func(t *testing.T) (net.Conn, net.Conn, net.Conn, net.Conn) {
			sender, src := net.Pipe()
			dst, receiver := net.Pipe()
			t.Cleanup(func() { sender.Close(); src.Close(); dst.Close(); receiver.Close() })
			return sender, src, dst, receiver
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sender, src, dst, receiver := tc.conns(t)
			r := newRelayer()
			r.pipes = newPipePool(tc.pipes)
			t.Cleanup(r.close)
			relayed := make(chan int64, 1)
			go func() { relayed <- r.copy(dst, src) }()
			go func() {
				for off := 0; off < len(payload); {
					end := min(off+(700<<10), len(payload))
					if _, err := sender.Write(payload[off:end]); err != nil {
						t.Error(err)
						return
					}
					off = end
					time.Sleep(20 * time.Millisecond)
				}
				if tc, ok := sender.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				} else {
					_ = sender.Close()
				}
			}()
			_ = receiver.SetReadDeadline(time.Now().Add(30 * time.Second))
			// ReadAll returns at EOF: the relay closed dst's write side.
			got, err := io.ReadAll(receiver)
			if err != nil {
				t.Fatalf("reading what was relayed: %v", err)
			}
			if !bytes.Equal(got, payload) {
				t.Fatalf("relayed %d bytes, not the %d sent (first difference at %d)", len(got), len(payload), firstDiff(got, payload))
			}
			if n := <-relayed; n != int64(len(payload)) {
				t.Errorf("the relay counted %d bytes, relayed %d", n, len(payload))
			}
			checkPipes(t, r, tc.name == "tcp")
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
