package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Username options: the username of Proxy-Authorization is "" or options
// joined by '.', each key-value (split at the first '-'):
//
//	ns-<namespace>      lease in this namespace (default: any the token may use)
//	session-<key>       a sticky session named key (one lease for its requests)
//	priority-<n>        the wait queue's priority band (the API checks the grant)
//	wait-<seconds>      wait up to this long for a free proxy (default: none)
//	<attribute>-<value> the proxy's attribute must have this value (selector)
//
// A username with no '-' at all (e.g. "scrapy") carries no options.
const (
	optNamespace = "ns"
	optSession   = "session"
	optPriority  = "priority"
	optWait      = "wait"
)

// maxUsername bounds what a username may hold (a hostile client's options
// are bounded before anything is allocated for them).
const (
	maxUsername   = 512
	maxOptions    = 16
	maxSessionKey = 128
)

// UsernameOptions are what a username asks for.
type UsernameOptions struct {
	Namespace string
	Session   string
	Selector  map[string]string
	Priority  int32
	Wait      time.Duration
}

// ParseUsername reads the options of a username (see the grammar above);
// the error says which option is wrong and why.
func ParseUsername(u string) (UsernameOptions, error) {
	var o UsernameOptions
	if len(u) > maxUsername {
		return o, fmt.Errorf("the username is %d bytes long, over %d", len(u), maxUsername)
	}
	if !strings.Contains(u, "-") {
		return o, nil
	}
	parts := strings.Split(u, ".")
	if len(parts) > maxOptions {
		return o, fmt.Errorf("the username has %d options, over %d", len(parts), maxOptions)
	}
	seen := map[string]bool{}
	for _, p := range parts {
		k, v, ok := strings.Cut(p, "-")
		if !ok || k == "" || v == "" {
			return o, fmt.Errorf("username option %q: want key-value (e.g. ns-crawlers, session-abc, region-eu)", p)
		}
		if seen[k] {
			return o, fmt.Errorf("username option %q: %s given twice", p, k)
		}
		seen[k] = true
		switch k {
		case optNamespace:
			o.Namespace = v
		case optSession:
			if len(v) > maxSessionKey {
				return o, fmt.Errorf("username option session: the key is %d bytes long, over %d", len(v), maxSessionKey)
			}
			o.Session = v
		case optPriority:
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return o, fmt.Errorf("username option %q: the priority must be an integer", p)
			}
			o.Priority = int32(n)
		case optWait:
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return o, fmt.Errorf("username option %q: the wait must be whole seconds (0-65535)", p)
			}
			o.Wait = time.Duration(n) * time.Second
		default:
			if o.Selector == nil {
				o.Selector = map[string]string{}
			}
			o.Selector[k] = v
		}
	}
	return o, nil
}
