package checkpoint

import (
	"slices"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// v1FixtureTime is the store's clock when testdata/v1 was written.
var v1FixtureTime = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)

// stateSummary is what a checkpoint must bring back, in a form that
// compares and prints plainly.
type stateSummary struct {
	Revision  uint64            `json:"revision"`
	Leases    map[string]string `json:"leases"` // ID → namespace/name on proxy, holder, expiry, labels, extra's name
	Cooldowns []string          `json:"cooldowns"`
	Ended     []string          `json:"ended"`
}

func summarize(st lease.State) stateSummary {
	out := stateSummary{Revision: st.Revision, Leases: map[string]string{}}
	for _, l := range st.Leases {
		extra := ""
		if x, ok := l.Meta.Extra.(interface{ GetName() string }); ok {
			extra = x.GetName()
		}
		out.Leases[l.ID] = strings.Join([]string{l.Namespace + "/" + l.Name, l.Proxy.Namespace + "/" + l.Proxy.Name, l.Holder, l.Flow, l.Target,
			l.ExpiresAt.UTC().Format(time.RFC3339Nano), l.LastResult, formatMap(l.Meta.Labels), formatMap(l.Meta.Annotations), extra}, " ")
	}
	for _, c := range st.Cooldowns {
		out.Cooldowns = append(out.Cooldowns, c.Proxy.String()+" "+c.Target+" "+c.Until.UTC().Format(time.RFC3339Nano)+" "+c.Holder)
	}
	for _, e := range st.Ended {
		out.Ended = append(out.Ended, e.ID+" "+e.Name.String()+" "+e.Proxy.String()+" "+e.Target+" "+e.Holder+" "+string(e.Reason)+" "+e.Until.UTC().Format(time.RFC3339Nano))
	}
	slices.Sort(out.Cooldowns)
	slices.Sort(out.Ended)
	return out
}

func formatMap(m map[string]string) string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return "{" + strings.Join(kv, ",") + "}"
}
