// Package rollout holds the shipped install (artifacts/install/base,
// applied with kubectl) to the real Deployment, ReplicaSet and disruption
// controllers of kube-controller-manager: `kubectl rollout restart` must
// finish and a drain must be able to evict the leader's pod. A kubelet
// stand-in reports the pods' readiness (no container runtime here): every
// pod Ready, as the operator's readiness probe now answers; the negative
// control reports only the leader Ready, as the old probe did, and shows the
// same test catching the stalled rollout and the refused eviction.
package rollout
