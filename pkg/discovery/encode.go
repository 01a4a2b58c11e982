package discovery

import (
	"bytes"
	"net/http"

	"github.com/proxy-operator/proxy-operator/pkg/discovery/wire"
	"github.com/proxy-operator/proxy-operator/pkg/plainjson"
)

// writeLease writes l as writeJSON writes a wire.Lease, without reflection:
// the lease is the body of every acquire, renew and get, and encoding it by
// reflection was a tenth of the lease path's own CPU. It writes into buf's
// storage (emptied first).
func writeLease(w http.ResponseWriter, status int, l wire.Lease, buf *bytes.Buffer) {
	buf.Reset()
	b, ok := appendLeaseJSON(buf.AvailableBuffer(), &l)
	if !ok {
		writeJSON(w, status, l)
		return
	}
	writeJSONHeader(w, status)
	// A write error here means the client went away; nothing to do.
	_, _ = w.Write(b)
}

// appendLeaseJSON appends l as json.Encoder writes it (then a newline), byte
// for byte, or reports false, having appended nothing, for a lease whose
// expiry has no RFC 3339 form (which the Encoder would refuse).
// TestLeaseJSONIsEncodingJSONs holds it to the Encoder.
func appendLeaseJSON(b []byte, l *wire.Lease) ([]byte, bool) {
	f := plainjson.Fields{B: append(b, '{')}
	f.String("leaseID", l.LeaseID, false)
	f.Key("proxy")
	p := &l.Proxy
	pf := plainjson.Fields{B: append(f.B, '{')}
	pf.String("name", p.Name, false)
	pf.String("namespace", p.Namespace, false)
	pf.String("url", p.URL, false)
	pf.String("host", p.Host, false)
	pf.Int("port", int64(p.Port), false)
	pf.StringMap("attributes", p.Attributes)
	pf.Int("latencyMillis", p.LatencyMillis, false)
	f.B = append(pf.B, '}')
	f.Bool("proxyHealthy", l.ProxyHealthy, false)
	f.Bool("proxyDraining", l.ProxyDraining, true)
	f.Key("expiresAt")
	var ok bool
	if f.B, ok = plainjson.AppendTime(f.B, l.ExpiresAt); !ok {
		return b, false
	}
	f.Int("ttlSeconds", l.TTLSeconds, false)
	f.Int("tier", int64(l.Tier), true)
	if c := l.Credentials; c != nil {
		f.Key("credentials")
		cf := plainjson.Fields{B: append(f.B, '{')}
		cf.String("username", c.Username, false)
		cf.String("password", c.Password, false)
		cf.Key("expiresAt")
		if cf.B, ok = plainjson.AppendTime(cf.B, c.ExpiresAt); !ok {
			return b, false
		}
		f.B = append(cf.B, '}')
	}
	if l.CoolingUntil != nil {
		f.Key("coolingUntil")
		if f.B, ok = plainjson.AppendTime(f.B, *l.CoolingUntil); !ok {
			return b, false
		}
	}
	return append(f.B, "}\n"...), true
}
