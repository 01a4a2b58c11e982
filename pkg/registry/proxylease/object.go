package proxylease

import (
	"crypto/sha1" //nolint:gosec // a name-based (version 5) UUID is defined with SHA-1; nothing secret is hashed.
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	leasingv1alpha1 "github.com/proxy-operator/proxy-operator/apis/leasing/v1alpha1"
	"github.com/proxy-operator/proxy-operator/pkg/leasing"
)

// uidFor derives the object's UID from the store's lease ID, so that a lease
// has one stable UID whether it was made through this API or over HTTP.
func uidFor(leaseID string) types.UID {
	h := sha1.Sum([]byte("leasing.crawl.example.com/" + leaseID)) //nolint:gosec // see import.
	h[6] = (h[6] & 0x0f) | 0x50                                   // version 5
	h[8] = (h[8] & 0x3f) | 0x80                                   // RFC 4122 variant
	var b [36]byte
	hex.Encode(b[0:8], h[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], h[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], h[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], h[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], h[10:16])
	return types.UID(b[:])
}

// buildObject renders a lease as a ProxyLease, all of it from the store:
// l.Meta has the labels and annotations, and as Extra the template of what
// the Kubernetes API was given (owner references, managed fields, the
// selector and priority; nil for a lease made over HTTP). The resourceVersion
// is rvBase plus the store revision (see leaseCache.rvBase).
func buildObject(svc *leasing.Service, l *leasing.Lease, rvBase uint64) *leasingv1alpha1.ProxyLease {
	obj := &leasingv1alpha1.ProxyLease{}
	tmpl, _ := l.Meta.Extra.(*leasingv1alpha1.ProxyLease)
	if tmpl != nil {
		tmpl.ObjectMeta.DeepCopyInto(&obj.ObjectMeta)
		tmpl.Spec.DeepCopyInto(&obj.Spec)
	}
	obj.Labels = maps.Clone(l.Meta.Labels)
	obj.Annotations = maps.Clone(l.Meta.Annotations)
	obj.Name = l.Name
	obj.Namespace = l.Namespace
	obj.GenerateName = ""
	if tmpl != nil {
		obj.GenerateName = tmpl.GenerateName
	}
	obj.UID = uidFor(l.ID)
	obj.ResourceVersion = strconv.FormatUint(rvBase+l.Revision, 10)
	obj.CreationTimestamp = metav1.NewTime(l.AcquiredAt)
	obj.Generation = 0
	obj.DeletionTimestamp = nil
	obj.DeletionGracePeriodSeconds = nil

	obj.Spec.Target = l.Target
	ttl := l.TTLSeconds()
	obj.Spec.TTLSeconds = &ttl

	acquired := metav1.NewTime(l.AcquiredAt)
	expires := metav1.NewTime(l.ExpiresAt)
	obj.Status = leasingv1alpha1.ProxyLeaseStatus{
		LeaseID:        l.ID,
		HolderIdentity: l.Holder,
		AcquireTime:    &acquired,
		ExpireTime:     &expires,
		LastResult:     leasingv1alpha1.ReportResult(l.LastResult),
		Tier:           int32(l.Tier),
		Conditions:     proxyConditions(l),
		Proxy: &leasingv1alpha1.LeasedProxy{
			Name:       l.Proxy.Name,
			URL:        l.Proxy.URL,
			Host:       l.Proxy.Host,
			Port:       l.Proxy.Port,
			Attributes: maps.Clone(l.Proxy.Attributes),
		},
	}
	if c, ok := svc.Credentials(*l); ok {
		obj.Status.Proxy.URL = c.WithURL(l.Proxy.URL)
		exp := metav1.NewTime(c.ExpiresAt)
		obj.Status.Credentials = &leasingv1alpha1.ProxyCredentials{Username: c.Username, Password: c.Password, ExpireTime: &exp}
	}
	if l.Proxy.LatencyMillis > 0 {
		ms := l.Proxy.LatencyMillis
		obj.Status.Proxy.LatencyMillis = &ms
	}
	return obj
}

// proxyConditions are a lease's conditions: ProxyHealthy, and ProxyDraining
// while its proxy's pool removes it.
func proxyConditions(l *leasing.Lease) []metav1.Condition {
	c := []metav1.Condition{proxyHealthyCondition(l)}
	if l.Proxy.Draining {
		since := l.AcquiredAt
		if l.ProxyChangedAt.After(since) {
			since = l.ProxyChangedAt
		}
		c = append(c, metav1.Condition{Type: leasingv1alpha1.ConditionProxyDraining, Status: metav1.ConditionTrue,
			Reason: leasingv1alpha1.ReasonPoolScaleDown, LastTransitionTime: metav1.NewTime(since),
			Message: "the proxy's ProxyPool is removing it: the lease lasts until deleted or the pool's drain timeout; move to another proxy when you can"})
	}
	return c
}

// proxyHealthyCondition is the ProxyHealthy condition of a lease: its
// proxy's health now, since the grant or the last change of it.
func proxyHealthyCondition(l *leasing.Lease) metav1.Condition {
	since := l.AcquiredAt
	if l.ProxyChangedAt.After(since) {
		since = l.ProxyChangedAt
	}
	c := metav1.Condition{
		Type:               leasingv1alpha1.ConditionProxyHealthy,
		Status:             metav1.ConditionTrue,
		Reason:             leasingv1alpha1.ReasonProxyHealthy,
		Message:            "the proxy passes its health probes",
		LastTransitionTime: metav1.NewTime(since),
	}
	if !l.Proxy.Healthy {
		c.Status = metav1.ConditionFalse
		c.Reason = leasingv1alpha1.ReasonProxyUnhealthy
		c.Message = "the proxy fails its health probes; move to another proxy or wait for it to recover"
	}
	return c
}

// metadataOf is what the store keeps of a ProxyLease the API was given.
func metadataOf(obj *leasingv1alpha1.ProxyLease) leasing.Metadata {
	t := &leasingv1alpha1.ProxyLease{}
	obj.ObjectMeta.DeepCopyInto(&t.ObjectMeta)
	obj.Spec.DeepCopyInto(&t.Spec)
	t.ResourceVersion = ""
	m := leasing.Metadata{Labels: t.Labels, Annotations: t.Annotations, Extra: t}
	t.Labels, t.Annotations = nil, nil
	return m
}

// MetadataCodec encodes the API metadata this server keeps with a lease
// (leasing.Metadata.Extra: the ProxyLease template of metadataOf) for the
// lease checkpoint, and decodes it back to the same type.
type MetadataCodec struct{}

// EncodeExtra encodes a ProxyLease template as JSON.
func (MetadataCodec) EncodeExtra(extra any) ([]byte, error) {
	t, ok := extra.(*leasingv1alpha1.ProxyLease)
	if !ok {
		return nil, fmt.Errorf("lease metadata is a %T, not a ProxyLease template", extra)
	}
	return json.Marshal(t)
}

// DecodeExtra decodes what EncodeExtra wrote.
func (MetadataCodec) DecodeExtra(data []byte) (any, error) {
	t := &leasingv1alpha1.ProxyLease{}
	if err := json.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("decoding a ProxyLease template: %w", err)
	}
	return t, nil
}
