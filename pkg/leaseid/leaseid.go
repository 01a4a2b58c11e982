package leaseid

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// MaxIDLength is the longest ID NewID returns: a Kubernetes object name (a
// DNS subdomain), since an ID is also the ProxyLease's name.
const MaxIDLength = 253

// KeySize is the signing key's length in bytes.
const KeySize = 32

const (
	version  = 1
	nonceLen = 8
	macLen   = 16 // 128 bits of HMAC-SHA256
	// flowIsHolder and flowUnderHolder say how the flow is kept: equal to
	// the holder, the holder plus "/" and the kept suffix, or in full.
	flowIsHolder    = 0
	flowUnderHolder = 1
	flowInFull      = 2
)

// encoding is lowercase base32 without padding: letters and 2–7 only, so an
// ID is a valid Kubernetes name and URL path segment.
var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ErrNotSigned is the answer for an ID this operator did not sign with its
// key: random, forged, tampered with, or of another key.
var ErrNotSigned = errors.New("not a lease ID this operator signed")

// IsNotSigned reports whether err is ErrNotSigned.
func IsNotSigned(err error) bool { return errors.Is(err, ErrNotSigned) }

// Signer signs and verifies lease IDs with one key. Until SetKey it signs
// nothing (NewID returns "", so the store falls back to random IDs) and
// verifies nothing. Safe for concurrent use.
type Signer struct {
	key atomic.Pointer[signingKey]
}

// signingKey is a key with the HMACs made from it: keying an HMAC hashes
// two blocks, a third of the cost of signing an ID, so they are kept and
// Reset rather than made anew for each ID.
type signingKey struct {
	key  []byte
	macs sync.Pool
}

func newSigningKey(key []byte) *signingKey {
	k := &signingKey{key: append([]byte(nil), key...)}
	k.macs.New = func() any { return hmac.New(sha256.New, k.key) }
	return k
}

// mac is the truncated HMAC-SHA256 of body under k.
func (k *signingKey) mac(body []byte) []byte {
	h := k.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(body)
	sum := h.Sum(nil)[:macLen]
	k.macs.Put(h)
	return sum
}

var _ lease.IDMaker = (*Signer)(nil)

// NewSigner returns a signer without a key.
func NewSigner() *Signer { return &Signer{} }

// SetKey sets the signing key (KeySize bytes or more).
func (s *Signer) SetKey(key []byte) error {
	if len(key) < KeySize {
		return fmt.Errorf("lease signing key: %d bytes, want at least %d", len(key), KeySize)
	}
	s.key.Store(newSigningKey(key))
	return nil
}

// NewID returns the signed ID of l (its ID unset; Namespace, Proxy, Holder,
// Flow, Target, AcquiredAt and TTL set; Name the prefix its name will have),
// or "" when there is no key yet or the prefix and the ID do not fit in
// MaxIDLength characters (long names, holder or target): such a lease gets a
// random ID and is not reclaimable after a crash.
func (s *Signer) NewID(l *lease.Lease) string {
	key := s.key.Load()
	if key == nil || l.Proxy.Namespace != l.Namespace {
		return ""
	}
	b := make([]byte, 0, 160)
	b = append(b, version)
	var nonce [nonceLen]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails (Go ≥1.24)
	b = append(b, nonce[:]...)
	b = binary.AppendUvarint(b, uint64(l.AcquiredAt.UnixMilli()))
	b = binary.AppendUvarint(b, uint64(l.TTL.Milliseconds()))
	b = appendString(b, l.Namespace)
	b = appendString(b, l.Proxy.Name)
	b = appendString(b, l.Holder)
	switch {
	case l.Flow == l.Holder:
		b = append(b, flowIsHolder)
	case strings.HasPrefix(l.Flow, l.Holder+"/"):
		b = append(b, flowUnderHolder)
		b = appendString(b, l.Flow[len(l.Holder)+1:])
	default:
		b = append(b, flowInFull)
		b = appendString(b, l.Flow)
	}
	b = appendString(b, l.Target)
	b = append(b, key.mac(b)...)
	if len(l.Name)+encoding.EncodedLen(len(b)) > MaxIDLength {
		return ""
	}
	return encoding.EncodeToString(b)
}

// minIDLength bounds the shortest ID NewID makes from below.
var minIDLength = encoding.EncodedLen(1 + nonceLen + macLen)

// Verify returns the lease name names, as it was granted: name is its ID or
// a lease name made of a prefix and the ID (lease.AcquireRequest.NamePrefix).
// The lease has ID, Name (= name), Namespace, Holder, Flow, Target, Proxy
// (namespace and name only), AcquiredAt, ExpiresAt and TTL (to the
// millisecond). Errors: ErrNotSigned, for every name without an ID this
// signer made (it does not say which byte is wrong). Verify does not look
// at the clock: an expired lease verifies.
func (s *Signer) Verify(name string) (lease.Lease, error) {
	key := s.key.Load()
	if key == nil || len(name) > MaxIDLength {
		return lease.Lease{}, ErrNotSigned
	}
	for i := 0; i+minIDLength <= len(name); i++ {
		if l, err := verify(key, name[i:]); err == nil {
			l.Name = name
			return l, nil
		}
	}
	return lease.Lease{}, ErrNotSigned
}

func verify(key *signingKey, id string) (lease.Lease, error) {
	b, err := encoding.DecodeString(id)
	if err != nil || len(b) < 1+nonceLen+macLen || b[0] != version {
		return lease.Lease{}, ErrNotSigned
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	if !hmac.Equal(sum, key.mac(body)) {
		return lease.Lease{}, ErrNotSigned
	}
	// A signed body is one NewID wrote; a decode failure is a bug, still
	// answered as not signed.
	r := reader{b: body[1+nonceLen:]}
	acquired, ttl := r.uvarint(), r.uvarint()
	l := lease.Lease{ID: id, Name: id}
	l.Namespace = r.string()
	l.Proxy = lease.ProxyInfo{Namespace: l.Namespace, Name: r.string()}
	l.Holder = r.string()
	switch r.byte() {
	case flowIsHolder:
		l.Flow = l.Holder
	case flowUnderHolder:
		l.Flow = l.Holder + "/" + r.string()
	case flowInFull:
		l.Flow = r.string()
	default:
		r.bad = true
	}
	l.Target = r.string()
	if r.bad || len(r.b) != 0 || acquired > 1<<53 || ttl > 1<<53 {
		return lease.Lease{}, ErrNotSigned
	}
	l.AcquiredAt = time.UnixMilli(int64(acquired))
	l.TTL = time.Duration(ttl) * time.Millisecond
	l.ExpiresAt = l.AcquiredAt.Add(l.TTL)
	return l, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes what NewID appended; bad is set on any short read.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
