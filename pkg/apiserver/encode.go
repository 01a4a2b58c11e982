package apiserver

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/plainjson"
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

// timePtr writes a *metav1.Time member with omitempty.
func timePtr(f *plainjson.Fields, name string, t *metav1.Time) {
	if t == nil {
		return
	}
	f.Key(name)
	f.B = appendTime(f.B, *t)
}

func appendObjectMeta(b []byte, m *metav1.ObjectMeta) []byte {
	f := plainjson.Fields{B: append(b, '{')}
	f.String("name", m.Name, true)
	f.String("generateName", m.GenerateName, true)
	f.String("namespace", m.Namespace, true)
	//lint:ignore SA1019 the serializer still writes selfLink when set; the bytes must match it
	f.String("selfLink", m.SelfLink, true)
	f.String("uid", string(m.UID), true)
	f.String("resourceVersion", m.ResourceVersion, true)
	f.Int("generation", m.Generation, true)
	if !m.CreationTimestamp.IsZero() { // omitzero
		f.Key("creationTimestamp")
		f.B = appendTime(f.B, m.CreationTimestamp)
	}
	timePtr(&f, "deletionTimestamp", m.DeletionTimestamp)
	if m.DeletionGracePeriodSeconds != nil {
		f.Int("deletionGracePeriodSeconds", *m.DeletionGracePeriodSeconds, false)
	}
	f.StringMap("labels", m.Labels)
	f.StringMap("annotations", m.Annotations)
	if len(m.Finalizers) > 0 {
		f.Key("finalizers")
		f.B = append(f.B, '[')
		for i, s := range m.Finalizers {
			if i > 0 {
				f.B = append(f.B, ',')
			}
			f.B = plainjson.AppendString(f.B, s)
		}
		f.B = append(f.B, ']')
	}
	return append(f.B, '}')
}

func appendSpec(b []byte, s *leasingv1alpha1.ProxyLeaseSpec) []byte {
	f := plainjson.Fields{B: append(b, '{')}
	f.StringMap("selector", s.Selector)
	if len(s.Selectors) > 0 { // omitempty
		f.Key("selectors")
		f.B = append(f.B, '[')
		for i, sel := range s.Selectors {
			if i > 0 {
				f.B = append(f.B, ',')
			}
			if sel == nil {
				f.B = append(f.B, "null"...)
				continue
			}
			f.B = plainjson.AppendStringMap(f.B, sel)
		}
		f.B = append(f.B, ']')
	}
	f.String("target", s.Target, true)
	if s.TTLSeconds != nil {
		f.Int("ttlSeconds", int64(*s.TTLSeconds), false)
	}
	f.Int("waitSeconds", int64(s.WaitSeconds), true)
	f.Int("priority", int64(s.Priority), true)
	return append(f.B, '}')
}

func appendStatus(b []byte, s *leasingv1alpha1.ProxyLeaseStatus) []byte {
	f := plainjson.Fields{B: append(b, '{')}
	f.String("leaseID", s.LeaseID, true)
	if p := s.Proxy; p != nil {
		f.Key("proxy")
		pf := plainjson.Fields{B: append(f.B, '{')}
		pf.String("name", p.Name, false)
		pf.String("url", p.URL, false)
		pf.String("host", p.Host, true)
		pf.Int("port", int64(p.Port), true)
		pf.StringMap("attributes", p.Attributes)
		if p.LatencyMillis != nil {
			pf.Int("latencyMillis", *p.LatencyMillis, false)
		}
		f.B = append(pf.B, '}')
	}
	f.String("holderIdentity", s.HolderIdentity, true)
	timePtr(&f, "acquireTime", s.AcquireTime)
	timePtr(&f, "expireTime", s.ExpireTime)
	f.String("lastResult", string(s.LastResult), true)
	f.Int("tier", int64(s.Tier), true)
	if c := s.Credentials; c != nil {
		f.Key("credentials")
		cf := plainjson.Fields{B: append(f.B, '{')}
		cf.String("username", c.Username, false)
		cf.String("password", c.Password, false)
		timePtr(&cf, "expireTime", c.ExpireTime)
		f.B = append(cf.B, '}')
	}
	if len(s.Conditions) > 0 {
		f.Key("conditions")
		f.B = append(f.B, '[')
		for i := range s.Conditions {
			if i > 0 {
				f.B = append(f.B, ',')
			}
			c := &s.Conditions[i]
			cf := plainjson.Fields{B: append(f.B, '{')}
			cf.String("type", c.Type, false)
			cf.String("status", string(c.Status), false)
			cf.Int("observedGeneration", c.ObservedGeneration, true)
			cf.Key("lastTransitionTime")
			cf.B = appendTime(cf.B, c.LastTransitionTime)
			cf.String("reason", c.Reason, false)
			cf.String("message", c.Message, false)
			f.B = append(cf.B, '}')
		}
		f.B = append(f.B, ']')
	}
	return append(f.B, '}')
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
