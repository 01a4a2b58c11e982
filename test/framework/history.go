package framework

import (
	"fmt"
	"slices"
	"time"
)

// Grant is one lease as a client lived it: held from Got (its grant
// received) to Ended (its release sent; still held while a release was
// refused).
type Grant struct {
	ID, Proxy  string
	Got, Ended time.Time
}

// Kill is one kill point of a history: a SIGKILL (Signal "SIGKILL") may
// explain a proxy granted twice, any other signal may not. Window, when
// known, is how long before At the last checkpoint was written (what a
// SIGKILL can lose); zero means CheckHistory's crash window.
type Kill struct {
	At     time.Time
	Signal string
	Window time.Duration
}

// HistoryResult is what CheckHistory found.
type HistoryResult struct {
	Grants, Kills int
	// Planned are grants of a proxy beyond its capacity not explained by a
	// crash: must be zero. Crash are those of a lease granted within the
	// crash window before a SIGKILL: leases granted after the last
	// checkpoint.
	Planned, Crash int
}

func (r HistoryResult) String() string {
	return fmt.Sprintf("%d grants, %d kill points: %d over capacity outside a crash window, %d within one (granted after the last checkpoint)",
		r.Grants, r.Kills, r.Planned, r.Crash)
}

// CheckHistory counts, per proxy (capacity 1), pairs of grants held at the
// same time. A pair is explained by a crash when the earlier grant was made
// within the kill's window (crashWindow unless the kill says) before a
// SIGKILL and the later after it.
func CheckHistory(grants []Grant, points []Kill, crashWindow time.Duration) HistoryResult {
	res := HistoryResult{Grants: len(grants), Kills: len(points)}
	byProxy := map[string][]Grant{}
	for _, g := range grants {
		byProxy[g.Proxy] = append(byProxy[g.Proxy], g)
	}
	for _, gs := range byProxy {
		slices.SortFunc(gs, func(a, b Grant) int { return a.Got.Compare(b.Got) })
		for i := range gs {
			for j := i + 1; j < len(gs) && gs[j].Got.Before(gs[i].Ended); j++ {
				explained := false
				for _, p := range points {
					w := crashWindow
					if p.Window > 0 {
						w = p.Window
					}
					if p.Signal == "SIGKILL" && !gs[i].Got.Before(p.At.Add(-w)) && gs[i].Got.Before(p.At) && gs[j].Got.After(p.At) {
						explained = true
					}
				}
				if explained {
					res.Crash++
				} else {
					res.Planned++
				}
			}
		}
	}
	return res
}
