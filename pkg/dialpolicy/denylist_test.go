package dialpolicy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/proxy-operator/proxy-operator/pkg/dialpolicy"
)

func TestDenylist(t *testing.T) {
	var d dialpolicy.Denylist
	if !d.Empty() {
		t.Error("a zero Denylist is not empty")
	}
	if err := d.AddServer(context.Background(), "https://127.0.0.1:6443"); err != nil {
		t.Fatal(err)
	}
	if err := d.AddServer(context.Background(), "https://localhost"); err != nil {
		t.Fatal(err)
	}
	if err := d.AddServer(context.Background(), "::not a url"); err == nil {
		t.Error("a server that is not a URL was taken")
	}
	d.Prefixes = []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}
	for ap, want := range map[string]bool{
		"127.0.0.1:6443":          true,
		"127.0.0.1:443":           true, // localhost, https's port
		"127.0.0.1:3128":          false,
		"[::ffff:127.0.0.1]:6443": true,
		"169.254.169.254:80":      true,
		"10.0.0.1:6443":           false,
	} {
		if got := d.Denies(netip.MustParseAddrPort(ap)); got != want {
			t.Errorf("Denies(%s) = %v, want %v", ap, got, want)
		}
	}
}

// A dialer with the Control refuses a denied address, whatever name led
// to it, before connecting; another it dials.
func TestControlRefusesBeforeConnecting(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	ap := netip.MustParseAddrPort(l.Addr().String())
	denied := dialpolicy.Denylist{Endpoints: []netip.AddrPort{ap}}
	dialer := net.Dialer{Control: denied.Control}
	_, err = dialer.DialContext(context.Background(), "tcp", fmt.Sprintf("localhost:%d", ap.Port()))
	if addr, ok := dialpolicy.IsDenied(err); !ok || addr != ap.String() {
		t.Fatalf("dial of a denied endpoint by name: %v, want a DeniedError for %s", err, ap)
	}
	select {
	case <-accepted:
		t.Fatal("the denied endpoint was connected to")
	default:
	}
	// The control: an empty Denylist dials.
	c, err := (&net.Dialer{Control: dialpolicy.Denylist{}.Control}).Dial("tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, ok := dialpolicy.IsDenied(errors.New("other")); ok {
		t.Error("IsDenied of another error")
	}
}
