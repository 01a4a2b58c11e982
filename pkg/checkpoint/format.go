package checkpoint

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// formatVersion is the document's version; a reader refuses others.
const formatVersion = 1

// maxDocumentBytes bounds a decompressed document (a corrupt or hostile
// checkpoint must not exhaust memory): about 50 times a 10,000-lease one.
const maxDocumentBytes = 512 << 20

// ExtraCodec turns what an API keeps as a lease's opaque metadata
// (lease.Metadata.Extra) into bytes and back. Nil Extra is never passed.
type ExtraCodec interface {
	EncodeExtra(extra any) ([]byte, error)
	DecodeExtra(data []byte) (any, error)
}

// document is the checkpoint as written.
type document struct {
	Version int `json:"version"`
	// RVBase is the aggregated API's resourceVersion base, kept so that its
	// resourceVersions stay the same across a restart.
	RVBase    uint64             `json:"rvBase"`
	Revision  uint64             `json:"revision"`
	Leases    []storedLease      `json:"leases"`
	Cooldowns []lease.Cooldown   `json:"cooldowns,omitempty"`
	Ended     []lease.EndedLease `json:"ended,omitempty"`
}

// storedLease is a lease with its opaque metadata encoded by the codec.
type storedLease struct {
	lease.Lease
	Extra []byte `json:"extra,omitempty"`
}

// encode writes st as a gzip-compressed document.
func encode(st lease.State, rvBase uint64, codec ExtraCodec) ([]byte, error) {
	doc := document{Version: formatVersion, RVBase: rvBase, Revision: st.Revision,
		Leases: make([]storedLease, 0, len(st.Leases)), Cooldowns: st.Cooldowns, Ended: st.Ended}
	for _, l := range st.Leases {
		sl := storedLease{Lease: l}
		if l.Meta.Extra != nil {
			if codec == nil {
				return nil, fmt.Errorf("lease %s carries API metadata and no codec was given", l.ID)
			}
			b, err := codec.EncodeExtra(l.Meta.Extra)
			if err != nil {
				return nil, fmt.Errorf("encoding lease %s: %w", l.ID, err)
			}
			sl.Extra = b
			sl.Meta.Extra = nil
		}
		doc.Leases = append(doc.Leases, sl)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if err := json.NewEncoder(zw).Encode(&doc); err != nil {
		return nil, fmt.Errorf("encoding the lease checkpoint: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ErrCorrupt is wrapped by every error of a checkpoint that cannot be read.
var ErrCorrupt = errors.New("lease checkpoint unreadable")

// IsCorrupt reports whether err is a checkpoint that cannot be read.
func IsCorrupt(err error) bool { return errors.Is(err, ErrCorrupt) }

// decode reads a gzip-compressed document.
func decode(data []byte, codec ExtraCodec) (lease.State, uint64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return lease.State{}, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxDocumentBytes+1))
	if err != nil {
		return lease.State{}, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(raw) > maxDocumentBytes {
		return lease.State{}, 0, fmt.Errorf("%w: larger than %d bytes decompressed", ErrCorrupt, maxDocumentBytes)
	}
	var doc document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return lease.State{}, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if doc.Version != formatVersion {
		return lease.State{}, 0, fmt.Errorf("%w: format version %d, this operator reads %d", ErrCorrupt, doc.Version, formatVersion)
	}
	st := lease.State{Revision: doc.Revision, Leases: make([]lease.Lease, 0, len(doc.Leases)), Cooldowns: doc.Cooldowns, Ended: doc.Ended}
	for _, sl := range doc.Leases {
		l := sl.Lease
		if len(sl.Extra) > 0 {
			if codec == nil {
				return lease.State{}, 0, fmt.Errorf("%w: lease %s carries API metadata and no codec was given", ErrCorrupt, l.ID)
			}
			extra, err := codec.DecodeExtra(sl.Extra)
			if err != nil {
				return lease.State{}, 0, fmt.Errorf("%w: lease %s: %v", ErrCorrupt, l.ID, err)
			}
			l.Meta.Extra = extra
		}
		st.Leases = append(st.Leases, l)
	}
	return st, doc.RVBase, nil
}
