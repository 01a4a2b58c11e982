// Package serving marks which of the operator's pods serves the lease APIs,
// so that the Services in front of them route to it while both replicas are
// Ready (docs/high-availability.md).
//
// Every replica runs a Labeller on its own pod. The pod that leads (its
// leasing gate is open) carries the label LabelKey=true and the annotation
// LeaderAnnotation, and removes both from its peers, whose processes may be
// gone (a crash, a lost node). A standby carries the label only as a
// successor: when no live peer (Ready, not being deleted) carries it, which
// is the moment a drain or a rollout deletes the leader's pod. The successor
// answers 503 with Retry-After until it has taken over, seconds later, so
// the Services and the APIService never lose their last endpoint to a
// planned handover. Among standbys that labelled themselves at once, the
// one with the smallest name keeps it. A replica takes leadership only while
// its pod is Ready (ReadyLock), so the leader is always a pod the label can
// go to: a replacement pod started during a drain cannot win the election
// before its readiness probe passes and lead where no request reaches it.
//
// At shutdown a pod leaves the Services before its servers stop (StepOut):
// being deleted, it hands its label to the successor and removes its own,
// and the runnables Hold wraps (the lease path) keep serving for
// ShutdownDelay while kube-proxy and kube-apiserver drop its endpoint.
//
// Files: decide.go (the rules, pure functions of the pods), labeller.go (the
// Runnable: a pod informer of the operator's namespace and the patches),
// stepout.go (the shutdown: StepOut applied, the delay, Hold), lock.go (the
// leader-election lock behind the readiness gate).
//
// It depends on client-go, the core API types and controller-runtime's
// logger only. It must not import
// pkg/leasing, pkg/lease or cmd: the composition root passes whether this
// replica serves as a function.
package serving
