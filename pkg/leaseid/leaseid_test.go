package leaseid

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

func keyed(t *testing.T, b byte) *Signer {
	t.Helper()
	s := NewSigner()
	if err := s.SetKey([]byte(strings.Repeat(string(b), KeySize))); err != nil {
		t.Fatal(err)
	}
	return s
}

var granted = time.Date(2026, 12, 1, 10, 0, 0, 123_456_789, time.UTC)

func grant(holder, flow, target string) lease.Lease {
	return lease.Lease{Namespace: "crawl", Proxy: lease.ProxyInfo{Namespace: "crawl", Name: "squid-7", URL: "http://10.0.0.7:3128"},
		Holder: holder, Flow: flow, Target: target, AcquiredAt: granted, ExpiresAt: granted.Add(90 * time.Second), TTL: 90 * time.Second}
}

func TestRoundTrip(t *testing.T) {
	s := keyed(t, 'k')
	for _, tc := range []struct {
		name string
		l    lease.Lease
	}{
		{"flow is the holder", grant("system:serviceaccount:crawl:crawler", "system:serviceaccount:crawl:crawler", "shop.example")},
		{"flow under the holder", grant("token:crawler-1", "token:crawler-1/batch-a", "")},
		{"flow of its own", grant("token:crawler-1", "other", "news.example")},
		{"sub-millisecond TTL", func() lease.Lease { l := grant("h", "h", ""); l.TTL = 1500 * time.Microsecond; return l }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := s.NewID(&tc.l)
			if id == "" {
				t.Fatal("no ID")
			}
			if msgs := validation.IsDNS1123Subdomain(id); len(msgs) > 0 {
				t.Fatalf("ID %q is not a Kubernetes name: %v", id, msgs)
			}
			got, err := s.Verify(id)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := lease.Lease{ID: id, Name: id, Namespace: tc.l.Namespace, Proxy: lease.ProxyInfo{Namespace: "crawl", Name: "squid-7"},
				Holder: tc.l.Holder, Flow: tc.l.Flow, Target: tc.l.Target, AcquiredAt: tc.l.AcquiredAt.Truncate(time.Millisecond),
				TTL: tc.l.TTL.Truncate(time.Millisecond)}
			want.ExpiresAt = want.AcquiredAt.Add(want.TTL)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Verify (-want +got):\n%s", diff)
			}
			if again := s.NewID(&tc.l); again == id {
				t.Errorf("two IDs of one lease are equal: %q", id)
			}
		})
	}
}

// Every single-character change of a valid ID is refused; the untouched ID
// verifies (the control).
func TestTamperedIDsAreRefused(t *testing.T) {
	s := keyed(t, 'k')
	l := grant("token:crawler-1", "token:crawler-1", "shop.example")
	id := s.NewID(&l)
	if _, err := s.Verify(id); err != nil {
		t.Fatalf("control: the untouched ID: %v", err)
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	for i := range id {
		for _, c := range alphabet {
			if byte(c) == id[i] {
				continue
			}
			bad := id[:i] + string(c) + id[i+1:]
			if _, err := s.Verify(bad); !IsNotSigned(err) {
				// The last character carries padding bits base32 ignores
				// only when it decodes to the same bytes: then it is the
				// same ID, not a forgery.
				if got, _ := encoding.DecodeString(bad); string(got) != mustDecode(t, id) {
					t.Fatalf("tampered at %d (%q): Verify = %v, want ErrNotSigned", i, bad, err)
				}
			}
		}
	}
	for name, bad := range map[string]string{
		"truncated":        id[:len(id)-4],
		"extended":         id + "aaaa",
		"random hex ID":    "0123456789abcdef0123456789abcdef",
		"empty":            "",
		"not base32":       strings.ToUpper(id),
		"over 253":         strings.Repeat("a", 254),
		"other key's ID":   keyed(t, 'o').NewID(&l),
		"version byte off": encoding.EncodeToString(append([]byte{2}, []byte(mustDecode(t, id))[1:]...)),
	} {
		if _, err := s.Verify(bad); !IsNotSigned(err) {
			t.Errorf("%s: Verify(%q) = %v, want ErrNotSigned", name, bad, err)
		}
	}
}

// A lease named by a prefix and its ID (generateName) is found by its name.
func TestPrefixedName(t *testing.T) {
	s := keyed(t, 'k')
	l := grant("system:serviceaccount:crawl:crawler", "system:serviceaccount:crawl:crawler", "shop.example")
	l.Name = "crawler-"
	id := s.NewID(&l)
	got, err := s.Verify("crawler-" + id)
	if err != nil || got.ID != id || got.Name != "crawler-"+id || got.Holder != l.Holder {
		t.Fatalf("Verify(prefix+ID) = %+v, %v", got, err)
	}
	if _, err := s.Verify("crawler-" + id[:len(id)-1]); !IsNotSigned(err) {
		t.Errorf("a prefixed name with a truncated ID verified: %v", err)
	}
	l.Name = strings.Repeat("p", MaxIDLength-len(id)+1)
	if long := s.NewID(&l); long != "" {
		t.Errorf("a prefix leaving no room got ID %q", long)
	}
}

func mustDecode(t *testing.T, id string) string {
	t.Helper()
	b, err := encoding.DecodeString(id)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNoIDWithoutKeyOrRoom(t *testing.T) {
	l := grant("h", "h", "")
	if id := NewSigner().NewID(&l); id != "" {
		t.Errorf("a signer without a key made %q", id)
	}
	if _, err := NewSigner().Verify(keyed(t, 'k').NewID(&l)); !IsNotSigned(err) {
		t.Errorf("a signer without a key verified: %v", err)
	}
	if err := NewSigner().SetKey([]byte("short")); err == nil {
		t.Error("a 5-byte key was accepted")
	}
	s := keyed(t, 'k')
	long := grant(strings.Repeat("h", 60), strings.Repeat("h", 60), strings.Repeat("t", 60))
	if id := s.NewID(&long); id != "" {
		t.Errorf("a lease too long for a name got %d-character ID %q", len(id), id)
	}
	// Just under the limit still gets one (the budget is ~120 bytes of names).
	fits := grant(strings.Repeat("h", 40), strings.Repeat("h", 40), strings.Repeat("t", 40))
	if id := s.NewID(&fits); id == "" || len(id) > MaxIDLength {
		t.Errorf("a lease that fits: ID %q (%d characters)", id, len(id))
	}
}
