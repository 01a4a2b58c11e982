package healthtest

import (
	"net"
	"time"
)

// ReplyPeer is a loopback listener that answers every connection with the
// same bytes, whatever was asked, then closes it: something that is not a
// proxy (an SSH banner) or a proxy that refuses in its own words.
type ReplyPeer struct {
	ln net.Listener
	// Addr is the listening host:port.
	Addr string
}

// NewReplyPeer listens on 127.0.0.1 and serves until Close.
func NewReplyPeer(reply string) (*ReplyPeer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			_ = c.SetDeadline(time.Now().Add(dialTimeout))
			buf := make([]byte, 4096)
			_, _ = c.Read(buf) // the start of the request; the reply ignores it
			_, _ = c.Write([]byte(reply))
			_ = c.Close()
		}
	}()
	return &ReplyPeer{ln: ln, Addr: ln.Addr().String()}, nil
}

// Close stops the listener.
func (p *ReplyPeer) Close() error { return p.ln.Close() }
