package flowcontrol

// Round-robin turns. Flows of a band holding equally many grants are served
// least recently served first. A flow's turn is a number: served flows take
// the next value of a counter each time they are served (in a round or on
// the fast path); flows never served — or forgotten, see turnMemory — take
// numbers from a second counter whose values all lie below servedBase, so
// they go before every flow that has been served, in the order they joined.
//
// Why not simply "join the back": with one proxy both flows hold nothing at
// every release, and a flow whose only request was just granted is idle
// until its next request arrives — after the release that ends its lease was
// dispatched. Sent to the back on its return, it lands behind a flow with two
// requests that was served after it, which then gets two turns per turn of
// the other. Remembering the turn while the flow is idle keeps its place.
//
// Why never-served flows go first: a flow granted at once on an idle proxy
// (fast path) has had its turn, and must not take a second before a flow
// that arrived at the same time and has had none. The price: a client that
// invents new flows keeps getting first turns among equals — but under any
// per-flow policy each invented flow gets a share, so the defence is in
// whoever names flows (authenticated identities) and the queue limits.

// servedBase is the first turn of a served flow; turns of never-served flows
// count up from 1 and stay below it.
const servedBase uint64 = 1 << 62

// minRememberedFlows is the least number of idle flows whose turns are kept
// (see rememberLimit).
const minRememberedFlows = 4096

// rememberLimit is the size of one generation of the turn memory: the
// larger of minRememberedFlows and the global queue limit. A remembered turn
// matters only if the flow comes back while flows it was served before or
// after still wait. At most MaxQueued flows wait at once, and in one pass of
// the round-robin over them each goes idle at most once, so a flow that
// returns within about a pass is among the last MaxQueued flows to have gone
// idle and is still remembered. A flow forgotten after a longer absence is
// treated as never served, i.e. served least recently, which is what it
// most likely is.
func rememberLimit(o Options) int { return max(o.MaxQueued, minRememberedFlows) }

// turnMemory keeps the turns of flows that stopped waiting, bounded by two
// generations of at most limit flows each: entries are written to cur; when
// cur is full it becomes prev and the old prev is cleared and reused. A flow
// is therefore remembered for at least limit writes of other flows after its
// own last one, and at most 2·limit flows are held, with O(1) work per write
// (amortised: a rotation clears limit entries) and no allocation once both
// maps have grown.
type turnMemory struct {
	cur, prev map[string]uint64
	limit     int
}

func newTurnMemory(limit int) turnMemory {
	return turnMemory{cur: map[string]uint64{}, prev: map[string]uint64{}, limit: limit}
}

// get returns flow's remembered turn.
func (m *turnMemory) get(flow string) (uint64, bool) {
	if t, ok := m.cur[flow]; ok {
		return t, true
	}
	t, ok := m.prev[flow]
	return t, ok
}

// put remembers turn for flow, unless a later turn is remembered (a flow
// waiting in two bands leaves each with its own turn).
func (m *turnMemory) put(flow string, turn uint64) {
	if t, ok := m.get(flow); ok && t > turn {
		turn = t
	}
	m.set(flow, turn)
}

// set remembers turn for flow; the caller knows it is the latest.
func (m *turnMemory) set(flow string, turn uint64) {
	if len(m.cur) >= m.limit {
		if _, ok := m.cur[flow]; !ok {
			m.prev, m.cur = m.cur, m.prev
			clear(m.cur)
		}
	}
	m.cur[flow] = turn
}

// len returns how many flows are remembered (a flow in both generations
// counts twice).
func (m *turnMemory) len() int { return len(m.cur) + len(m.prev) }
