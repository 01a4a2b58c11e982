package apiserver

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
)

// appendProxyLeaseJSON appends pl as the generic server's JSON codec writes a
// v1alpha1 ProxyLease — encoding/json of the object with its kind and
// apiVersion set, then a newline — byte for byte, without reflection: on the
// lean path the reflective encoder and the deep copy the versioning codec
// makes cost more than the lease itself. It reports false, having appended
// nothing, for an object it does not cover (owner references, managed
// fields), which the codec then encodes.
// TestProxyLeaseJSONIsTheCodecs holds it to the codec's output.
func appendProxyLeaseJSON(b []byte, pl *leasingv1alpha1.ProxyLease) ([]byte, bool) {
	if !fastEncodable(pl) {
		return b, false
	}
	b = append(b, `{"kind":"ProxyLease","apiVersion":"`...)
	b = append(b, leasingv1alpha1.SchemeGroupVersion.String()...)
	b = append(b, `","metadata":`...)
	b = appendObjectMeta(b, &pl.ObjectMeta)
	b = append(b, `,"spec":`...)
	b = appendSpec(b, &pl.Spec)
	b = append(b, `,"status":`...)
	b = appendStatus(b, &pl.Status)
	return append(b, "}\n"...), true
}

// fastEncodable: owner references and managed fields are the codec's to
// write (the lean path records neither).
func fastEncodable(pl *leasingv1alpha1.ProxyLease) bool {
	return len(pl.OwnerReferences) == 0 && len(pl.ManagedFields) == 0
}

// jsonFields writes the members of one JSON object, a comma before all but
// the first.
type jsonFields struct {
	b     []byte
	count int
}

// key starts member name (a constant of plain ASCII: no escaping needed).
func (f *jsonFields) key(name string) {
	if f.count > 0 {
		f.b = append(f.b, ',')
	}
	f.count++
	f.b = append(f.b, '"')
	f.b = append(f.b, name...)
	f.b = append(f.b, '"', ':')
}

// str writes a string member; omitempty leaves out "".
func (f *jsonFields) str(name, v string, omitempty bool) {
	if omitempty && v == "" {
		return
	}
	f.key(name)
	f.b = appendJSONString(f.b, v)
}

// int writes an integer member; omitempty leaves out 0.
func (f *jsonFields) int(name string, v int64, omitempty bool) {
	if omitempty && v == 0 {
		return
	}
	f.key(name)
	f.b = strconv.AppendInt(f.b, v, 10)
}

// strMap writes a map[string]string member with omitempty.
func (f *jsonFields) strMap(name string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	f.key(name)
	f.b = appendStringMap(f.b, m)
}

// timePtr writes a *metav1.Time member with omitempty.
func (f *jsonFields) timePtr(name string, t *metav1.Time) {
	if t == nil {
		return
	}
	f.key(name)
	f.b = appendTime(f.b, *t)
}

func appendObjectMeta(b []byte, m *metav1.ObjectMeta) []byte {
	f := jsonFields{b: append(b, '{')}
	f.str("name", m.Name, true)
	f.str("generateName", m.GenerateName, true)
	f.str("namespace", m.Namespace, true)
	//lint:ignore SA1019 the serializer still writes selfLink when set; the bytes must match it
	f.str("selfLink", m.SelfLink, true)
	f.str("uid", string(m.UID), true)
	f.str("resourceVersion", m.ResourceVersion, true)
	f.int("generation", m.Generation, true)
	if !m.CreationTimestamp.IsZero() { // omitzero
		f.key("creationTimestamp")
		f.b = appendTime(f.b, m.CreationTimestamp)
	}
	f.timePtr("deletionTimestamp", m.DeletionTimestamp)
	if m.DeletionGracePeriodSeconds != nil {
		f.int("deletionGracePeriodSeconds", *m.DeletionGracePeriodSeconds, false)
	}
	f.strMap("labels", m.Labels)
	f.strMap("annotations", m.Annotations)
	if len(m.Finalizers) > 0 {
		f.key("finalizers")
		f.b = append(f.b, '[')
		for i, s := range m.Finalizers {
			if i > 0 {
				f.b = append(f.b, ',')
			}
			f.b = appendJSONString(f.b, s)
		}
		f.b = append(f.b, ']')
	}
	return append(f.b, '}')
}

func appendSpec(b []byte, s *leasingv1alpha1.ProxyLeaseSpec) []byte {
	f := jsonFields{b: append(b, '{')}
	f.strMap("selector", s.Selector)
	f.str("target", s.Target, true)
	if s.TTLSeconds != nil {
		f.int("ttlSeconds", int64(*s.TTLSeconds), false)
	}
	f.int("waitSeconds", int64(s.WaitSeconds), true)
	f.int("priority", int64(s.Priority), true)
	return append(f.b, '}')
}

func appendStatus(b []byte, s *leasingv1alpha1.ProxyLeaseStatus) []byte {
	f := jsonFields{b: append(b, '{')}
	f.str("leaseID", s.LeaseID, true)
	if p := s.Proxy; p != nil {
		f.key("proxy")
		pf := jsonFields{b: append(f.b, '{')}
		pf.str("name", p.Name, false)
		pf.str("url", p.URL, false)
		pf.str("host", p.Host, true)
		pf.int("port", int64(p.Port), true)
		pf.strMap("attributes", p.Attributes)
		if p.LatencyMillis != nil {
			pf.int("latencyMillis", *p.LatencyMillis, false)
		}
		f.b = append(pf.b, '}')
	}
	f.str("holderIdentity", s.HolderIdentity, true)
	f.timePtr("acquireTime", s.AcquireTime)
	f.timePtr("expireTime", s.ExpireTime)
	f.str("lastResult", string(s.LastResult), true)
	if len(s.Conditions) > 0 {
		f.key("conditions")
		f.b = append(f.b, '[')
		for i := range s.Conditions {
			if i > 0 {
				f.b = append(f.b, ',')
			}
			c := &s.Conditions[i]
			cf := jsonFields{b: append(f.b, '{')}
			cf.str("type", c.Type, false)
			cf.str("status", string(c.Status), false)
			cf.int("observedGeneration", c.ObservedGeneration, true)
			cf.key("lastTransitionTime")
			cf.b = appendTime(cf.b, c.LastTransitionTime)
			cf.str("reason", c.Reason, false)
			cf.str("message", c.Message, false)
			f.b = append(cf.b, '}')
		}
		f.b = append(f.b, ']')
	}
	return append(f.b, '}')
}

// appendTime is metav1.Time's MarshalJSON without its allocation.
func appendTime(b []byte, t metav1.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"')
}

// appendStringMap writes m with its keys sorted, as encoding/json does.
func appendStringMap(b []byte, m map[string]string) []byte {
	var stack [16]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

// appendJSONString writes s quoted. Printable ASCII other than what
// encoding/json escapes (the quote, the backslash, and <, > and & as HTML
// escaping does) is copied; any other string — rare in a lease — is written
// by encoding/json itself, so its escaping rules stay the one source.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, err := json.Marshal(s)
			if err != nil { // unreachable: every Go string encodes
				return strconv.AppendQuote(b, s)
			}
			return append(b, quoted...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
