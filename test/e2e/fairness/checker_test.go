package fairnesse2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// grant is one lease a crawler held, with the times its own client saw.
type grant struct {
	crawler string
	// sent: the acquire request left the client; granted: its success
	// answer arrived; releaseSent: the release request left; released: its
	// answer arrived.
	sent, granted, releaseSent, released time.Time
}

// violation is one place where a grant sequence breaks a rule.
type violation struct {
	// Kind is "overlap" or "unfair".
	Kind string
	// At is the index, in grant order, of the second grant involved.
	At int
	// Detail explains it for a human; not compared by tests.
	Detail string
}

// Violation kinds.
const (
	kindOverlap = "overlap"
	kindUnfair  = "unfair"
)

// inOrder returns grants sorted by the time their answer arrived. With one
// exclusively leased proxy this is the true order of holders: grant i+1 is
// made after grant i is released, which is after its holder sent the release,
// which is after grant i's answer arrived.
func inOrder(grants []grant) []grant {
	seq := slices.Clone(grants)
	slices.SortStableFunc(seq, func(a, b grant) int { return a.granted.Compare(b.granted) })
	return seq
}

// checkGrants checks the grants of crawlers contending for ONE proxy that
// takes one lease at a time:
//
//   - overlap: a grant's answer arrived before the previous holder had even
//     sent its release: two holders of an exclusive proxy at once.
//   - unfair: a crawler got two grants in a row while another crawler had a
//     request outstanding since before the first of the two grants arrived.
//
// Why "since before the first of the two arrived": such a request was
// outstanding during the whole hold (hold time plus a release round trip)
// before capacity reappeared, so a fair queue had it waiting when the release
// came, and the release must go to it, not to the releasing crawler's next
// request (sent only after its release returned). A request sent later may
// reach the server after the release, when the releasing crawler's next
// request can rightly find the proxy free; counting that as unfair would
// make the check flaky. Consecutive grants to a crawler while nobody else
// waits (the other one has finished its rounds) are fine.
//
// This is tighter than "per-crawler counts within ±1 over the window": it
// pins every single hand-over, and a window count can hide an AABB pattern.
func checkGrants(grants []grant) []violation {
	seq := inOrder(grants)
	var out []violation
	for i := 1; i < len(seq); i++ {
		prev, cur := seq[i-1], seq[i]
		if cur.granted.Before(prev.releaseSent) {
			out = append(out, violation{Kind: kindOverlap, At: i, Detail: fmt.Sprintf(
				"grant %d (%s) arrived %s before grant %d (%s) was released",
				i, cur.crawler, prev.releaseSent.Sub(cur.granted), i-1, prev.crawler)})
		}
		if cur.crawler != prev.crawler {
			continue
		}
		for _, o := range grants {
			if o.crawler != cur.crawler && o.sent.Before(prev.granted) && o.granted.After(cur.granted) {
				out = append(out, violation{Kind: kindUnfair, At: i, Detail: fmt.Sprintf(
					"%s got grants %d and %d in a row while %s waited from %s before grant %d until %s after grant %d",
					cur.crawler, i-1, i, o.crawler, prev.granted.Sub(o.sent), i-1, o.granted.Sub(cur.granted), i)})
				break
			}
		}
	}
	return out
}

// windowImbalance returns the largest minus the smallest number of grants
// the crawlers in names got while all of them were still contending: in
// grant order, up to the first crawler's last grant. With one exclusive
// proxy, a fair queue gives contending flows equal turns whatever their
// demand, so it is at most 1; a greedy flow with two workers served
// first-come-first-served (or round-robin that lets it cut in) gets about
// two grants per turn of the other, an imbalance growing with the window.
//
// It complements checkGrants, whose per-hand-over rule cannot see a crawler
// that cuts in just as the other's next request arrives.
func windowImbalance(grants []grant, names []string) (imbalance int, counts map[string]int) {
	seq := inOrder(grants)
	last := map[string]int{}
	for i, g := range seq {
		last[g.crawler] = i
	}
	end := len(seq) - 1
	for _, n := range names {
		// A crawler never served does not shorten the window: it
		// contended throughout.
		if i, ok := last[n]; ok {
			end = min(end, i)
		}
	}
	counts = map[string]int{}
	for _, n := range names {
		counts[n] = 0
	}
	for _, g := range seq[:end+1] {
		counts[g.crawler]++
	}
	lo, hi := len(seq), 0
	for _, n := range names {
		lo, hi = min(lo, counts[n]), max(hi, counts[n])
	}
	return hi - lo, counts
}

// holders renders the grant order with one letter per crawler (A for the
// first name, B for the second, …), e.g. "ABABAB".
func holders(grants []grant, names []string) string {
	var b strings.Builder
	for _, g := range inOrder(grants) {
		i := slices.Index(names, g.crawler)
		if i < 0 || i > 25 {
			b.WriteByte('?')
			continue
		}
		b.WriteByte(byte('A' + i))
	}
	return b.String()
}

// synthetic builds a grant from millisecond offsets; the release answer comes
// 1ms after the release was sent.
func synthetic(crawler string, sent, granted, releaseSent int) grant {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	return grant{crawler: crawler, sent: ms(sent), granted: ms(granted), releaseSent: ms(releaseSent), released: ms(releaseSent + 1)}
}

// TestGrantCheckerCatchesUnfairSequences is the negative control of the
// fairness tests: checkGrants flags unfair and overlapping sequences, and
// does not flag fair ones, including the legitimate repeats its rule allows.
func TestGrantCheckerCatchesUnfairSequences(t *testing.T) {
	a, b := "crawler-a", "crawler-b"
	tests := []struct {
		name   string
		grants []grant
		want   []violation
	}{
		{
			name: "strict alternation",
			grants: []grant{
				synthetic(a, 0, 1, 51), synthetic(b, 0, 52, 102),
				synthetic(a, 53, 103, 153), synthetic(b, 104, 154, 204),
			},
		},
		{
			name: "a served twice while b waited the whole hold",
			grants: []grant{
				synthetic(a, 0, 1, 51), synthetic(b, 0, 104, 154),
				synthetic(a, 53, 54, 103),
			},
			want: []violation{{Kind: kindUnfair, At: 1}},
		},
		{
			name: "a served three times while b waited",
			grants: []grant{
				synthetic(a, 0, 1, 51), synthetic(a, 53, 54, 103),
				synthetic(a, 105, 106, 155), synthetic(b, 0, 157, 200),
			},
			want: []violation{{Kind: kindUnfair, At: 1}, {Kind: kindUnfair, At: 2}},
		},
		{
			name: "a served twice, b sent only after a's first grant arrived",
			grants: []grant{
				synthetic(a, 0, 1, 51), synthetic(b, 30, 104, 154),
				synthetic(a, 53, 54, 103),
			},
		},
		{
			name: "b finished its rounds: a's repeats are fine",
			grants: []grant{
				synthetic(a, 0, 1, 51), synthetic(b, 0, 52, 102),
				synthetic(a, 53, 103, 153), synthetic(a, 155, 156, 206),
			},
		},
		{
			name: "b granted before a sent its release",
			grants: []grant{
				synthetic(a, 0, 1, 51), synthetic(b, 0, 40, 90),
			},
			want: []violation{{Kind: kindOverlap, At: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkGrants(tt.grants)
			if diff := cmp.Diff(tt.want, got, cmp.FilterPath(func(p cmp.Path) bool {
				return p.Last().String() == ".Detail"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("checkGrants (-want +got):\n%s\nsequence %s", diff, holders(tt.grants, []string{a, b}))
			}
		})
	}
	if got := holders([]grant{synthetic(b, 0, 52, 102), synthetic(a, 0, 1, 51)}, []string{a, b}); got != "AB" {
		t.Errorf("holders = %q, want AB (ordered by grant time)", got)
	}
}

// TestWindowImbalanceCatchesAGreedyFlow is the negative control of
// windowImbalance: a greedy crawler served twice per turn is caught; strict
// alternation and repeats after the other crawler finished are not.
func TestWindowImbalanceCatchesAGreedyFlow(t *testing.T) {
	a, b := "greedy", "polite"
	// seq builds grants in the order of letters: A for a, B for b, each
	// granted 10ms after the previous one.
	seq := func(letters string) []grant {
		var out []grant
		for i, l := range letters {
			c := a
			if l == 'B' {
				c = b
			}
			out = append(out, synthetic(c, 10*i-5, 10*i, 10*i+8))
		}
		return out
	}
	tests := []struct {
		letters string
		want    int
	}{
		// The window ends with the first finisher's last grant.
		{"ABABABAB", 1},
		{"ABABABABA", 0},
		{"BABABABAAAA", 1},
		// A double grant at start-up (both flows' first requests racing) is
		// within the tolerance.
		{"AABABABABA", 1},
		{"AABAABAABAAB", 5},
		{"AAAAB", 4},
		{"AAAA", 4}, // b never served at all
	}
	for _, tt := range tests {
		got, counts := windowImbalance(seq(tt.letters), []string{a, b})
		if got != tt.want {
			t.Errorf("windowImbalance(%s) = %d (%v), want %d", tt.letters, got, counts, tt.want)
		}
	}
}
