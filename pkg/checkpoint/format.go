package checkpoint

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
	"github.com/proxy-operator/proxy-operator/pkg/plainjson"
)

// formatVersion is the document's version; a reader refuses others.
const formatVersion = 1

// maxDocumentBytes bounds a decompressed document (a corrupt or hostile
// checkpoint must not exhaust memory): about 50 times a 100,000-lease one.
const maxDocumentBytes = 512 << 20

// ExtraCodec turns what an API keeps as a lease's opaque metadata
// (lease.Metadata.Extra) into bytes and back. Nil Extra is never passed.
type ExtraCodec interface {
	EncodeExtra(extra any) ([]byte, error)
	DecodeExtra(data []byte) (any, error)
}

// document is the checkpoint as written. Each distinct proxy (as leases
// show it) is written once, and times are Unix nanoseconds: a checkpoint of
// many leases on few proxies is mostly lease IDs.
type document struct {
	Version int `json:"version"`
	// Journal marks a journal segment: a delta on the snapshot and the
	// segments before it (Leases, Cooldowns and Ended are the new or
	// changed ones, the Deleted* lists those gone).
	Journal bool `json:"journal,omitempty"`
	// RVBase is the aggregated API's resourceVersion base, kept so that its
	// resourceVersions stay the same across a restart.
	RVBase   uint64 `json:"rvBase"`
	Revision uint64 `json:"revision"`
	// TakenAt is when the store's state was taken (Unix nanoseconds).
	TakenAt   int64             `json:"takenAt,omitempty"`
	Proxies   []lease.ProxyInfo `json:"proxies,omitempty"`
	Leases    []storedLease     `json:"leases"`
	Cooldowns []storedCooldown  `json:"cooldowns,omitempty"`
	Ended     []storedEnded     `json:"ended,omitempty"`
	// Of a journal segment only.
	DeletedLeases    []string            `json:"deletedLeases,omitempty"`
	DeletedCooldowns []storedCooldownKey `json:"deletedCooldowns,omitempty"`
	DeletedEnded     []string            `json:"deletedEnded,omitempty"`
}

type storedCooldownKey struct {
	Namespace string `json:"ns"`
	Proxy     string `json:"proxy"`
	Target    string `json:"target,omitempty"`
}

// storedLease is a lease; Proxy indexes document.Proxies.
type storedLease struct {
	ID             string            `json:"id"`
	Namespace      string            `json:"ns"`
	Name           string            `json:"name,omitempty"`
	Holder         string            `json:"holder,omitempty"`
	Flow           string            `json:"flow,omitempty"`
	Target         string            `json:"target,omitempty"`
	Tier           int               `json:"tier,omitempty"`
	Proxy          int               `json:"proxy"`
	AcquiredAt     int64             `json:"acquired"`
	ProxyChangedAt int64             `json:"proxyChanged,omitempty"`
	ExpiresAt      int64             `json:"expires"`
	TTL            time.Duration     `json:"ttl"`
	LastResult     string            `json:"lastResult,omitempty"`
	Revision       uint64            `json:"rev"`
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Extra          []byte            `json:"extra,omitempty"`
}

type storedCooldown struct {
	Namespace string `json:"ns"`
	Proxy     string `json:"proxy"`
	Target    string `json:"target,omitempty"`
	Until     int64  `json:"until"`
	Holder    string `json:"holder,omitempty"`
}

type storedEnded struct {
	ID             string       `json:"id"`
	Namespace      string       `json:"ns"`
	Name           string       `json:"name"`
	ProxyNamespace string       `json:"proxyNs"`
	Proxy          string       `json:"proxy"`
	Target         string       `json:"target,omitempty"`
	Holder         string       `json:"holder,omitempty"`
	Reason         lease.Reason `json:"reason"`
	Until          int64        `json:"until"`
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// encoder writes checkpoints, reusing its buffers from one to the next. It
// streams the document into the compressor a chunk at a time, so that what
// it keeps between writes is the compressed payload, the distinct proxies
// and a proxy index per lease, not a second copy of every lease. Leases,
// cooldowns and ended leases are written without reflection (the writer
// takes the whole state every second, and encoding/json was half of its
// CPU); TestRecordsAreEncodingJSONs holds them to json.Marshal.
type encoder struct {
	buf bytes.Buffer
	zw  *gzip.Writer
	// chunk collects what goes into zw next.
	chunk []byte
	// proxies, proxyIndex and leaseProxy are reused: the distinct proxies
	// and each lease's index into them.
	proxies    []lease.ProxyInfo
	proxyIndex map[lease.ProxyKey][]int
	leaseProxy []int
	err        error
}

// chunkBytes is how much the encoder collects before compressing it.
const chunkBytes = 64 << 10

// encode writes st as a gzip-compressed document, its leases in st's order
// (a reader needs none); the result is valid until the next call.
func (enc *encoder) encode(st *lease.State, rvBase uint64, codec ExtraCodec) ([]byte, error) {
	return enc.encodeDocument(st, nil, rvBase, codec)
}

// encodeDelta writes d as a journal segment; the result is valid until the
// next call.
func (enc *encoder) encodeDelta(d *delta, rvBase uint64, codec ExtraCodec) ([]byte, error) {
	return enc.encodeDocument(&d.puts, d, rvBase, codec)
}

// encodeDocument writes st, and with a delta (gone) its deletions as a
// journal segment.
func (enc *encoder) encodeDocument(st *lease.State, gone *delta, rvBase uint64, codec ExtraCodec) ([]byte, error) {
	if enc.proxyIndex == nil {
		enc.proxyIndex = map[lease.ProxyKey][]int{}
	}
	clear(enc.proxyIndex)
	enc.proxies, enc.leaseProxy = enc.proxies[:0], slices.Grow(enc.leaseProxy[:0], len(st.Leases))
	for i := range st.Leases {
		enc.leaseProxy = append(enc.leaseProxy, enc.proxyOf(st.Leases[i].Proxy))
	}
	enc.buf.Reset()
	if enc.zw == nil {
		zw, err := gzip.NewWriterLevel(&enc.buf, gzip.BestSpeed)
		if err != nil {
			return nil, err
		}
		enc.zw = zw
	} else {
		enc.zw.Reset(&enc.buf)
	}
	enc.chunk = enc.chunk[:0]
	// The document's fields in order (see document), its arrays element by
	// element.
	enc.chunk = append(enc.chunk, `{"version":`...)
	enc.chunk = strconv.AppendUint(enc.chunk, formatVersion, 10)
	if gone != nil {
		enc.chunk = append(enc.chunk, `,"journal":true`...)
	}
	enc.chunk = append(enc.chunk, `,"rvBase":`...)
	enc.chunk = strconv.AppendUint(enc.chunk, rvBase, 10)
	enc.chunk = append(enc.chunk, `,"revision":`...)
	enc.chunk = strconv.AppendUint(enc.chunk, st.Revision, 10)
	if t := unixNano(st.TakenAt); t != 0 {
		enc.chunk = append(enc.chunk, `,"takenAt":`...)
		enc.chunk = strconv.AppendInt(enc.chunk, t, 10)
	}
	if len(enc.proxies) > 0 {
		// A few per lease at most: encoding/json's.
		enc.chunk = append(enc.chunk, `,"proxies":`...)
		b, err := json.Marshal(enc.proxies)
		if err != nil {
			return nil, fmt.Errorf("encoding the lease checkpoint: %w", err)
		}
		enc.chunk = append(enc.chunk, b...)
	}
	enc.chunk = append(enc.chunk, `,"leases":[`...)
	var sl storedLease
	for i := range st.Leases {
		l := &st.Leases[i]
		sl = storedLease{ID: l.ID, Namespace: l.Namespace, Name: l.Name, Holder: l.Holder, Flow: l.Flow, Target: l.Target, Tier: l.Tier,
			Proxy: enc.leaseProxy[i], AcquiredAt: unixNano(l.AcquiredAt), ProxyChangedAt: unixNano(l.ProxyChangedAt),
			ExpiresAt: unixNano(l.ExpiresAt), TTL: l.TTL, LastResult: l.LastResult, Revision: l.Revision,
			Labels: l.Meta.Labels, Annotations: l.Meta.Annotations}
		if l.Name == l.ID {
			sl.Name = ""
		}
		if l.Meta.Extra != nil {
			if codec == nil {
				return nil, fmt.Errorf("lease %s carries API metadata and no codec was given", l.ID)
			}
			b, err := codec.EncodeExtra(l.Meta.Extra)
			if err != nil {
				return nil, fmt.Errorf("encoding lease %s: %w", l.ID, err)
			}
			sl.Extra = b
		}
		enc.comma(i)
		enc.chunk = sl.appendJSON(enc.chunk)
		enc.flushFull()
	}
	enc.chunk = append(enc.chunk, ']')
	if len(st.Cooldowns) > 0 {
		enc.chunk = append(enc.chunk, `,"cooldowns":[`...)
		for i, c := range st.Cooldowns {
			enc.comma(i)
			sc := storedCooldown{Namespace: c.Proxy.Namespace, Proxy: c.Proxy.Name, Target: c.Target, Until: unixNano(c.Until), Holder: c.Holder}
			enc.chunk = sc.appendJSON(enc.chunk)
			enc.flushFull()
		}
		enc.chunk = append(enc.chunk, ']')
	}
	if len(st.Ended) > 0 {
		enc.chunk = append(enc.chunk, `,"ended":[`...)
		for i, e := range st.Ended {
			enc.comma(i)
			se := storedEnded{ID: e.ID, Namespace: e.Name.Namespace, Name: e.Name.Name, ProxyNamespace: e.Proxy.Namespace,
				Proxy: e.Proxy.Name, Target: e.Target, Holder: e.Holder, Reason: e.Reason, Until: unixNano(e.Until)}
			enc.chunk = se.appendJSON(enc.chunk)
			enc.flushFull()
		}
		enc.chunk = append(enc.chunk, ']')
	}
	if gone != nil {
		enc.deletions(gone)
	}
	enc.chunk = append(enc.chunk, "}\n"...)
	enc.flush()
	if enc.err != nil {
		err := enc.err
		enc.err = nil
		return nil, fmt.Errorf("encoding the lease checkpoint: %w", err)
	}
	if err := enc.zw.Close(); err != nil {
		return nil, err
	}
	return enc.buf.Bytes(), nil
}

// deletions writes a journal segment's Deleted* lists.
func (enc *encoder) deletions(d *delta) {
	if len(d.deletedLeases) > 0 {
		enc.stringList(`,"deletedLeases":[`, d.deletedLeases)
	}
	if len(d.deletedCooldowns) > 0 {
		enc.chunk = append(enc.chunk, `,"deletedCooldowns":[`...)
		for i, k := range d.deletedCooldowns {
			enc.comma(i)
			f := plainjson.Fields{B: append(enc.chunk, '{')}
			f.String("ns", k.proxy.Namespace, false)
			f.String("proxy", k.proxy.Name, false)
			f.String("target", k.target, true)
			enc.chunk = append(f.B, '}')
			enc.flushFull()
		}
		enc.chunk = append(enc.chunk, ']')
	}
	if len(d.deletedEnded) > 0 {
		enc.stringList(`,"deletedEnded":[`, d.deletedEnded)
	}
}

// stringList writes key (`,"name":[`), the strings, and the closing bracket.
func (enc *encoder) stringList(key string, ss []string) {
	enc.chunk = append(enc.chunk, key...)
	for i, s := range ss {
		enc.comma(i)
		enc.chunk = plainjson.AppendString(enc.chunk, s)
		enc.flushFull()
	}
	enc.chunk = append(enc.chunk, ']')
}

// proxyOf is p's index in enc.proxies, added when new: each distinct proxy
// (as leases show it) is written once.
func (enc *encoder) proxyOf(p lease.ProxyInfo) int {
	for _, i := range enc.proxyIndex[p.Key()] {
		if sameProxy(enc.proxies[i], p) {
			return i
		}
	}
	enc.proxies = append(enc.proxies, p)
	i := len(enc.proxies) - 1
	enc.proxyIndex[p.Key()] = append(enc.proxyIndex[p.Key()], i)
	return i
}

func (enc *encoder) comma(i int) {
	if i > 0 {
		enc.chunk = append(enc.chunk, ',')
	}
}

// flushFull compresses the chunk once it is full; flush compresses it. The
// first error is kept in enc.err and reported once the document is done.
func (enc *encoder) flushFull() {
	if len(enc.chunk) >= chunkBytes {
		enc.flush()
	}
}

func (enc *encoder) flush() {
	if enc.err == nil {
		_, enc.err = enc.zw.Write(enc.chunk)
	}
	enc.chunk = enc.chunk[:0]
}

// appendJSON appends l as json.Marshal writes it.
func (l *storedLease) appendJSON(b []byte) []byte {
	f := plainjson.Fields{B: append(b, '{')}
	f.String("id", l.ID, false)
	f.String("ns", l.Namespace, false)
	f.String("name", l.Name, true)
	f.String("holder", l.Holder, true)
	f.String("flow", l.Flow, true)
	f.String("target", l.Target, true)
	f.Int("tier", int64(l.Tier), true)
	f.Int("proxy", int64(l.Proxy), false)
	f.Int("acquired", l.AcquiredAt, false)
	f.Int("proxyChanged", l.ProxyChangedAt, true)
	f.Int("expires", l.ExpiresAt, false)
	f.Int("ttl", int64(l.TTL), false)
	f.String("lastResult", l.LastResult, true)
	f.Uint("rev", l.Revision, false)
	f.StringMap("labels", l.Labels)
	f.StringMap("annotations", l.Annotations)
	if len(l.Extra) > 0 {
		f.Key("extra")
		f.B = append(f.B, '"')
		f.B = base64.StdEncoding.AppendEncode(f.B, l.Extra)
		f.B = append(f.B, '"')
	}
	return append(f.B, '}')
}

// appendJSON appends c as json.Marshal writes it.
func (c *storedCooldown) appendJSON(b []byte) []byte {
	f := plainjson.Fields{B: append(b, '{')}
	f.String("ns", c.Namespace, false)
	f.String("proxy", c.Proxy, false)
	f.String("target", c.Target, true)
	f.Int("until", c.Until, false)
	f.String("holder", c.Holder, true)
	return append(f.B, '}')
}

// appendJSON appends e as json.Marshal writes it.
func (e *storedEnded) appendJSON(b []byte) []byte {
	f := plainjson.Fields{B: append(b, '{')}
	f.String("id", e.ID, false)
	f.String("ns", e.Namespace, false)
	f.String("name", e.Name, false)
	f.String("proxyNs", e.ProxyNamespace, false)
	f.String("proxy", e.Proxy, false)
	f.String("target", e.Target, true)
	f.String("holder", e.Holder, true)
	f.String("reason", string(e.Reason), false)
	f.Int("until", e.Until, false)
	return append(f.B, '}')
}

func sameProxy(a, b lease.ProxyInfo) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.URL == b.URL && a.Host == b.Host && a.Port == b.Port &&
		a.LatencyMillis == b.LatencyMillis && a.Healthy == b.Healthy && a.Draining == b.Draining && maps.Equal(a.Attributes, b.Attributes)
}

// ErrCorrupt is wrapped by every error of a checkpoint that cannot be read.
var ErrCorrupt = errors.New("lease checkpoint unreadable")

// IsCorrupt reports whether err is a checkpoint that cannot be read.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// decode reads a gzip-compressed snapshot.
func decode(data []byte, codec ExtraCodec) (lease.State, uint64, error) {
	doc, err := decodeDocument(data)
	if err != nil {
		return lease.State{}, 0, err
	}
	if doc.Journal {
		return lease.State{}, 0, fmt.Errorf("%w: a journal segment where the snapshot belongs", ErrCorrupt)
	}
	st, err := doc.state(codec)
	return st, doc.RVBase, err
}

// decodeDelta reads a gzip-compressed journal segment.
func decodeDelta(data []byte, codec ExtraCodec) (delta, error) {
	doc, err := decodeDocument(data)
	if err != nil {
		return delta{}, err
	}
	if !doc.Journal {
		return delta{}, fmt.Errorf("%w: a snapshot where a journal segment belongs", ErrCorrupt)
	}
	st, err := doc.state(codec)
	if err != nil {
		return delta{}, err
	}
	d := delta{puts: st, deletedLeases: doc.DeletedLeases, deletedEnded: doc.DeletedEnded}
	for _, k := range doc.DeletedCooldowns {
		d.deletedCooldowns = append(d.deletedCooldowns, cooldownKey{lease.ProxyKey{Namespace: k.Namespace, Name: k.Proxy}, k.Target})
	}
	return d, nil
}

// decodeDocument decompresses and parses a document of this format.
func decodeDocument(data []byte) (*document, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(raw) > maxDocumentBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes decompressed", ErrCorrupt, maxDocumentBytes)
	}
	var doc document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if doc.Version != formatVersion {
		return nil, fmt.Errorf("%w: format version %d, this operator reads %d", ErrCorrupt, doc.Version, formatVersion)
	}
	return &doc, nil
}

// state is the document's leases, cooldowns and ended leases.
func (doc *document) state(codec ExtraCodec) (lease.State, error) {
	st := lease.State{Revision: doc.Revision, TakenAt: fromUnixNano(doc.TakenAt), Leases: make([]lease.Lease, 0, len(doc.Leases))}
	for _, sl := range doc.Leases {
		if sl.Proxy < 0 || sl.Proxy >= len(doc.Proxies) {
			return lease.State{}, fmt.Errorf("%w: lease %s names proxy %d of %d", ErrCorrupt, sl.ID, sl.Proxy, len(doc.Proxies))
		}
		l := lease.Lease{ID: sl.ID, Namespace: sl.Namespace, Name: sl.Name, Holder: sl.Holder, Flow: sl.Flow, Target: sl.Target, Tier: sl.Tier,
			Proxy: doc.Proxies[sl.Proxy], AcquiredAt: fromUnixNano(sl.AcquiredAt), ProxyChangedAt: fromUnixNano(sl.ProxyChangedAt),
			ExpiresAt: fromUnixNano(sl.ExpiresAt), TTL: sl.TTL, LastResult: sl.LastResult, Revision: sl.Revision,
			Meta: lease.Metadata{Labels: sl.Labels, Annotations: sl.Annotations}}
		if l.Name == "" {
			l.Name = l.ID
		}
		if len(sl.Extra) > 0 {
			if codec == nil {
				return lease.State{}, fmt.Errorf("%w: lease %s carries API metadata and no codec was given", ErrCorrupt, l.ID)
			}
			extra, err := codec.DecodeExtra(sl.Extra)
			if err != nil {
				return lease.State{}, fmt.Errorf("%w: lease %s: %v", ErrCorrupt, l.ID, err)
			}
			l.Meta.Extra = extra
		}
		st.Leases = append(st.Leases, l)
	}
	for _, c := range doc.Cooldowns {
		st.Cooldowns = append(st.Cooldowns, lease.Cooldown{Proxy: lease.ProxyKey{Namespace: c.Namespace, Name: c.Proxy}, Target: c.Target, Until: fromUnixNano(c.Until), Holder: c.Holder})
	}
	for _, e := range doc.Ended {
		st.Ended = append(st.Ended, lease.EndedLease{ID: e.ID, Name: lease.ProxyKey{Namespace: e.Namespace, Name: e.Name},
			Proxy: lease.ProxyKey{Namespace: e.ProxyNamespace, Name: e.Proxy}, Target: e.Target, Holder: e.Holder, Reason: e.Reason, Until: fromUnixNano(e.Until)})
	}
	return st, nil
}
