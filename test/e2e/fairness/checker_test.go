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
