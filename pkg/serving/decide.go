package serving

import (
	corev1 "k8s.io/api/core/v1"
)

const (
	// LabelKey is the label the lease APIs' Services select on (value
	// LabelValue): the pod that serves leases, or its successor during a
	// handover.
	LabelKey = "leasing.crawl.example.com/serving"
	// LabelValue is LabelKey's value on a serving pod.
	LabelValue = "true"
	// LeaderAnnotation marks, beside the label, the pod that serves because
	// it leads (a successor has the label alone).
	LeaderAnnotation = "leasing.crawl.example.com/leader"
)

// Change is what one pod's label and annotation must become.
type Change struct {
	Pod string
	// Label and Leader are the wanted states of LabelKey and
	// LeaderAnnotation on Pod.
	Label, Leader bool
}

// Decide returns the changes that bring the pods to the rule, given this
// replica's pod, its peers (the other pods of the operator, self excluded)
// and whether this replica serves leases now. Only changes are returned;
// none when self is unknown (not yet in the informer's cache).
func Decide(self *corev1.Pod, peers []*corev1.Pod, serving bool) []Change {
	if self == nil {
		return nil
	}
	var out []Change
	want := func(p *corev1.Pod, label, leader bool) {
		if labelled(p) != label || isLeader(p) != leader {
			out = append(out, Change{Pod: p.Name, Label: label, Leader: leader})
		}
	}
	if serving {
		want(self, true, true)
		// A leader that is being deleted (or not Ready, so out of the
		// Services) leaves the successor that labelled itself its label.
		if live(self) {
			for _, p := range peers {
				want(p, false, false)
			}
		}
		return out
	}
	// A standby not Ready (starting: its servers and their authentication
	// may not be up) or being deleted carries no label: the label routes
	// requests regardless of readiness (publishNotReadyAddresses).
	if !live(self) {
		want(self, false, false)
		return out
	}
	want(self, successor(self, peers), false)
	return out
}

// successor says whether a standby should carry the label: no live peer
// leads, and no live labelled peer has a smaller name.
func successor(self *corev1.Pod, peers []*corev1.Pod) bool {
	for _, p := range peers {
		if !live(p) || !labelled(p) {
			continue
		}
		if isLeader(p) || p.Name < self.Name {
			return false
		}
	}
	return true
}

// live is a pod that may serve: Ready and not being deleted.
func live(p *corev1.Pod) bool { return !terminating(p) && isReady(p) }

// isReady is the pod's Ready condition.
func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func terminating(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }

func labelled(p *corev1.Pod) bool { return p.Labels[LabelKey] == LabelValue }

func isLeader(p *corev1.Pod) bool { return p.Annotations[LeaderAnnotation] == LabelValue }

// StepOut is the rule of a replica shutting down, given its pod and its
// peers: whether it is done stepping out of the lease APIs' Services, and
// the change that takes it out, if one is due. A pod without the label is
// out already. A labelled pod gives up its label once a live peer carries
// it too (the successor a deletion of this pod makes), so the Services keep
// an endpoint; until then it waits. A labelled pod that is not being deleted
// (a lost leadership, a process stopped in place) has no successor coming:
// it keeps its label, which the next leader takes.
func StepOut(self *corev1.Pod, peers []*corev1.Pod) (done bool, change *Change) {
	if self == nil || !labelled(self) || !terminating(self) {
		return true, nil
	}
	for _, p := range peers {
		if live(p) && labelled(p) {
			return true, &Change{Pod: self.Name}
		}
	}
	return false, nil
}
