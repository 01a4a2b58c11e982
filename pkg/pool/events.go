package pool

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Event reasons of a pool's decisions (events.k8s.io Events on the
// ProxyPool).
const (
	EventReasonScaled   = "Scaled"
	EventReasonDraining = "Draining"
	EventReasonDrained  = "Drained"
	EventReasonAdopted  = "Adopted"
	EventReasonReleased = "Released"
)

// Actions of those Events.
const (
	actionScale   = "Scale"
	actionDrain   = "Drain"
	actionDelete  = "Delete"
	actionAdopt   = "Adopt"
	actionRelease = "Release"
)

// event emits a Normal Event about the pool; a nil Recorder emits nothing.
func (r *Reconciler) event(pool runtime.Object, related runtime.Object, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(pool, related, corev1.EventTypeNormal, reason, action, note, args...)
}
