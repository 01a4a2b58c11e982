package leasing

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MinPriority is the lowest priority a request may ask for. Any identity may
// ask for less than the default (0), down to this; more only by a grant
// (PriorityGrants). The bands, and their metric series, stay a bounded set.
const MinPriority = -10

// PriorityGrants say who may ask for a priority above the default, as API
// Priority and Fairness assigns priority levels by user and group: subject
// "token:<identity>" (an HTTP token), "user:<name>" or "group:<name>" (a
// Kubernetes user, or any member of a group) to the highest priority it may
// ask for. An identity may use the highest of its grants, and 0 without
// one. A pflag.Value: --lease-max-priority=token:crawler-a=10,group:ops=5.
type PriorityGrants map[string]int

// Max is the highest priority id may ask for.
func (g PriorityGrants) Max(id Identity) int {
	best := 0
	for subject, max := range g {
		kind, name, _ := strings.Cut(subject, ":")
		var match bool
		switch kind {
		case "token":
			match = id.Holder == HTTPIdentity(name, "").Holder
		case "user":
			match = !strings.HasPrefix(id.Holder, HTTPHolderPrefix) && id.Holder == KubernetesIdentity(name).Holder
		case "group":
			match = slices.Contains(id.Groups, name)
		}
		if match && max > best {
			best = max
		}
	}
	return best
}

// String lists the grants, sorted.
func (g PriorityGrants) String() string {
	out := make([]string, 0, len(g))
	for s, p := range g {
		out = append(out, s+"="+strconv.Itoa(p))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// Set adds comma-separated subject=priority grants.
func (g PriorityGrants) Set(v string) error {
	for entry := range strings.SplitSeq(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		subject, value, ok := strings.Cut(entry, "=")
		kind, name, _ := strings.Cut(subject, ":")
		p, err := strconv.Atoi(value)
		switch {
		case !ok || err != nil:
			return fmt.Errorf("%q: want subject=priority, e.g. token:crawler-a=10", entry)
		case kind != "token" && kind != "user" && kind != "group" || name == "":
			return fmt.Errorf("%q: the subject is token:<identity>, user:<name> or group:<name>", entry)
		case p < 1 || p > maxGrantedPriority:
			return fmt.Errorf("%q: a granted priority is between 1 and %d (0 needs no grant)", entry, maxGrantedPriority)
		}
		g[subject] = p
	}
	return nil
}

// Type names the flag's value type.
func (PriorityGrants) Type() string { return "grants" }

// maxGrantedPriority bounds a grant, as MinPriority bounds the other side.
const maxGrantedPriority = 100
