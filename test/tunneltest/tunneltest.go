package tunneltest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// EchoServer listens on loopback until the test ends and answers every
// connection with what it reads: the far end of tunnels under test.
func EchoServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// Tunnel opens a CONNECT tunnel to target through the proxy at proxyAddr,
// sending auth as Proxy-Authorization, and returns the connection and the
// proxy's answer (its status 200 or an error).
func Tunnel(proxyAddr, auth, target string) (net.Conn, *http.Response, error) {
	conn, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", target, target, auth); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("CONNECT %s through %s: %s", target, proxyAddr, resp.Status)
	}
	if err != nil {
		_ = conn.Close()
		return nil, resp, err
	}
	return conn, resp, nil
}

// Relays reports whether a round trip still crosses a tunnel to an
// EchoServer.
func Relays(conn net.Conn) bool {
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		return false
	}
	b := make([]byte, 4)
	_, err := io.ReadFull(conn, b)
	return err == nil && string(b) == "ping"
}

// StopsRelaying reports whether conn stops relaying within d: a tunnel
// being closed (by another goroutine) stops at once or within a few round
// trips.
func StopsRelaying(conn net.Conn, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for Relays(conn) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
