package v1alpha1

// DefaultTTLSeconds is the lease duration when spec.ttlSeconds is not set.
const DefaultTTLSeconds int32 = 300

// SetDefaults_ProxyLease fills the defaults of a ProxyLease: ttlSeconds 300.
// waitSeconds and priority default to their zero values.
//
//nolint:revive,staticcheck // the underscore is the Kubernetes defaulter naming convention.
func SetDefaults_ProxyLease(l *ProxyLease) {
	if l.Spec.TTLSeconds == nil {
		ttl := DefaultTTLSeconds
		l.Spec.TTLSeconds = &ttl
	}
}
