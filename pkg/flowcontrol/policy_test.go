package flowcontrol

// policyKind names a policy in the simulation's tables: the fair one and
// the negative controls that must fail its checks.
type policyKind uint8

const (
	// policyFair: the production policy (fairPolicy).
	policyFair policyKind = iota
	// policyFIFO: the oldest head across flows first.
	policyFIFO
	// policyStrict: a fixed order of flows (by name): the first flow with a
	// waiter always wins.
	policyStrict
	// policyBandBlind: policyFair across all bands as if they were one.
	policyBandBlind
	// policyFairForgetful: fewest held first, round-robin among equals
	// where a flow that starts waiting joins the back and a grant made at
	// once is no turn — what policyFair did before turns were remembered,
	// kept as the negative control of the one-proxy tie cases.
	policyFairForgetful
)

// setPolicy must be called before the first request.
func (c *Core[R, G]) setPolicy(k policyKind) {
	switch k {
	case policyFIFO:
		c.usePolicy(fifoPolicy[R, G]{})
	case policyStrict:
		c.usePolicy(strictPolicy[R, G]{})
	case policyBandBlind:
		c.usePolicy(bandBlindPolicy[R, G]{})
	case policyFairForgetful:
		c.usePolicy(forgetfulPolicy[R, G]{})
	default:
		c.usePolicy(fairPolicy[R, G]{})
	}
}

type fifoPolicy[R, G any] struct{}

func (fifoPolicy[R, G]) less(a, b *flowQueue[R, G]) bool { return a.oldest() < b.oldest() }
func (fifoPolicy[R, G]) usesHeld() bool                  { return false }
func (fifoPolicy[R, G]) remembersTurns() bool            { return false }
func (fifoPolicy[R, G]) acrossBands() bool               { return false }

type strictPolicy[R, G any] struct{}

func (strictPolicy[R, G]) less(a, b *flowQueue[R, G]) bool { return a.name < b.name }
func (strictPolicy[R, G]) usesHeld() bool                  { return false }
func (strictPolicy[R, G]) remembersTurns() bool            { return false }
func (strictPolicy[R, G]) acrossBands() bool               { return false }

type bandBlindPolicy[R, G any] struct{ fairPolicy[R, G] }

func (bandBlindPolicy[R, G]) acrossBands() bool { return true }

type forgetfulPolicy[R, G any] struct{ fairPolicy[R, G] }

func (forgetfulPolicy[R, G]) remembersTurns() bool { return false }
