package app

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxy-operator/proxy-operator/pkg/discovery"
	"github.com/proxy-operator/proxy-operator/pkg/flowcontrol"
	"github.com/proxy-operator/proxy-operator/pkg/lease"
)

// Lease store, HTTP discovery API and flow-control settings. Run wires them
// (leasingwiring.go); the aggregated API server has its own flag set
// (pkg/apiserver, every flag prefixed --apiserver-).

// DiscoveryTokenEnv holds the discovery API's one bearer token (identity
// discovery.DefaultIdentity) when --discovery-token-file is not set. A token
// never goes on the command line, where every user of the machine can read
// it.
const DiscoveryTokenEnv = "PROXY_OPERATOR_DISCOVERY_TOKEN"

// Flow-control queue limit defaults. A waiting request holds an HTTP
// connection (or an aggregated API request) open, so the limits bound
// goroutines and sockets as much as they bound unfairness.
const (
	DefaultQueueMaxPerFlow = 64
	DefaultQueueMaxPerBand = 1024
	DefaultQueueMax        = 4096
)

// LeasingOptions configure the lease store, the HTTP discovery API and the
// wait queue in front of both lease APIs.
type LeasingOptions struct {
	// DiscoveryAddr serves the HTTP discovery API ("0" disables it).
	DiscoveryAddr string
	// DiscoveryTokenFile holds the accepted bearer tokens, one
	// "token,identity" line each, or a single bare token (identity
	// "discovery"); see ParseDiscoveryTokens. Empty: one token from
	// $PROXY_OPERATOR_DISCOVERY_TOKEN; with neither, authentication is off
	// and the server says so loudly.
	DiscoveryTokenFile string
	// DiscoveryMaxWait caps waitSeconds of POST /v1/leases.
	DiscoveryMaxWait time.Duration

	// MaxLeasesPerProxy, MaxLeaseTTL, DefaultLeaseTTL, CooldownWindow and
	// SweepInterval are the lease store's options (lease.Options).
	MaxLeasesPerProxy int
	MaxLeaseTTL       time.Duration
	DefaultLeaseTTL   time.Duration
	CooldownWindow    time.Duration
	SweepInterval     time.Duration

	// QueueMaxPerFlow, QueueMaxPerBand and QueueMax bound waiting lease
	// requests (flowcontrol.Options); over a limit a request is answered 429
	// at once. QueueRetryAfter is the Retry-After of that answer.
	QueueMaxPerFlow int
	QueueMaxPerBand int
	QueueMax        int
	QueueRetryAfter time.Duration
}

// DefaultLeasingOptions returns the defaults.
func DefaultLeasingOptions() LeasingOptions {
	return LeasingOptions{
		DiscoveryAddr:     discovery.DefaultAddr,
		DiscoveryMaxWait:  discovery.DefaultMaxWait,
		MaxLeasesPerProxy: lease.DefaultMaxLeasesPerProxy,
		MaxLeaseTTL:       lease.DefaultMaxTTL,
		DefaultLeaseTTL:   lease.DefaultDefaultTTL,
		CooldownWindow:    lease.DefaultCooldownWindow,
		SweepInterval:     lease.DefaultSweepInterval,
		QueueMaxPerFlow:   DefaultQueueMaxPerFlow,
		QueueMaxPerBand:   DefaultQueueMaxPerBand,
		QueueMax:          DefaultQueueMax,
		QueueRetryAfter:   flowcontrol.DefaultRetryAfter,
	}
}

// AddFlags registers the leasing flags on fs.
func (o *LeasingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DiscoveryAddr, "discovery-bind-address", o.DiscoveryAddr, "Address of the HTTP discovery (lease) API; \"0\" disables it.")
	fs.StringVar(&o.DiscoveryTokenFile, "discovery-token-file", o.DiscoveryTokenFile, "File of the discovery API's bearer tokens: one token,identity line each (# comments), or a single bare token (identity \""+discovery.DefaultIdentity+"\"). Unset: one token from $"+DiscoveryTokenEnv+"; with neither, authentication is OFF (logged as a warning).")
	fs.DurationVar(&o.DiscoveryMaxWait, "discovery-max-wait", o.DiscoveryMaxWait, "Longest waitSeconds a POST /v1/leases may ask for.")
	fs.IntVar(&o.MaxLeasesPerProxy, "max-leases-per-proxy", o.MaxLeasesPerProxy, "Live leases one proxy may hold at once (1: exclusive).")
	fs.DurationVar(&o.MaxLeaseTTL, "max-lease-ttl", o.MaxLeaseTTL, "Longest TTL a lease may be granted or renewed for.")
	fs.DurationVar(&o.DefaultLeaseTTL, "default-lease-ttl", o.DefaultLeaseTTL, "TTL of a lease that asks for none.")
	fs.DurationVar(&o.CooldownWindow, "cooldown-window", o.CooldownWindow, "How long a (proxy, target) pair is skipped after a rate_limited or banned report, and how long an ended lease stays reportable.")
	fs.DurationVar(&o.SweepInterval, "lease-sweep-interval", o.SweepInterval, "How often ended leases and cooldowns are freed from memory (expiry itself is checked on every read).")
	fs.IntVar(&o.QueueMaxPerFlow, "lease-queue-max-per-flow", o.QueueMaxPerFlow, "Waiting lease requests one flow (token identity or Kubernetes user) may have in one priority band.")
	fs.IntVar(&o.QueueMaxPerBand, "lease-queue-max-per-band", o.QueueMaxPerBand, "Waiting lease requests per priority band.")
	fs.IntVar(&o.QueueMax, "lease-queue-max", o.QueueMax, "Waiting lease requests in all.")
	fs.DurationVar(&o.QueueRetryAfter, "lease-queue-retry-after", o.QueueRetryAfter, "Retry-After of a lease request rejected because a wait queue is full.")
}

// Validate reports every invalid leasing option.
func (o *LeasingOptions) Validate() error {
	var errs []error
	if o.DiscoveryAddr != "0" {
		if err := validateBindAddress(o.DiscoveryAddr); err != nil {
			errs = append(errs, fmt.Errorf("--discovery-bind-address: %w", err))
		}
	}
	if o.MaxLeasesPerProxy < 1 {
		errs = append(errs, fmt.Errorf("--max-leases-per-proxy: must be at least 1, got %d", o.MaxLeasesPerProxy))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--discovery-max-wait", o.DiscoveryMaxWait},
		{"--max-lease-ttl", o.MaxLeaseTTL},
		{"--default-lease-ttl", o.DefaultLeaseTTL},
		{"--cooldown-window", o.CooldownWindow},
		{"--lease-sweep-interval", o.SweepInterval},
		{"--lease-queue-retry-after", o.QueueRetryAfter},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", d.flag, d.v))
		}
	}
	if o.DefaultLeaseTTL > o.MaxLeaseTTL && o.MaxLeaseTTL > 0 {
		errs = append(errs, fmt.Errorf("--default-lease-ttl %s exceeds --max-lease-ttl %s", o.DefaultLeaseTTL, o.MaxLeaseTTL))
	}
	for _, q := range []struct {
		flag string
		v    int
	}{
		{"--lease-queue-max-per-flow", o.QueueMaxPerFlow},
		{"--lease-queue-max-per-band", o.QueueMaxPerBand},
		{"--lease-queue-max", o.QueueMax},
	} {
		if q.v < 1 {
			errs = append(errs, fmt.Errorf("%s: must be at least 1, got %d", q.flag, q.v))
		}
	}
	return errors.Join(errs...)
}

// DiscoveryTokens returns the bearer tokens the discovery API accepts, each
// mapped to the identity it stands for (the lease holder "http:<identity>"
// and the default fairness flow): the entries of --discovery-token-file
// (ParseDiscoveryTokens), else $PROXY_OPERATOR_DISCOVERY_TOKEN (read through
// getenv) as one token of identity discovery.DefaultIdentity, else nil
// (authentication off). A token file that is set but unreadable, empty or
// malformed is an error rather than a silent "auth off". No error holds a
// token.
func (o *LeasingOptions) DiscoveryTokens(getenv func(string) string) (map[string]string, error) {
	if o.DiscoveryTokenFile == "" {
		token := strings.TrimSpace(getenv(DiscoveryTokenEnv))
		if token == "" {
			return nil, nil
		}
		if strings.Contains(token, ",") {
			return nil, fmt.Errorf("$%s holds one bare token (identity %q) and must not contain a comma; for token,identity lines use --discovery-token-file",
				DiscoveryTokenEnv, discovery.DefaultIdentity)
		}
		if !validToken(token) {
			return nil, fmt.Errorf("$%s: %s", DiscoveryTokenEnv, badTokenMsg)
		}
		return discovery.SingleToken(token), nil
	}
	f, err := os.Open(o.DiscoveryTokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading --discovery-token-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading --discovery-token-file: %w", err)
	}
	if len(data) > maxTokenFileBytes {
		return nil, fmt.Errorf("--discovery-token-file %s: %w", o.DiscoveryTokenFile,
			&TokenFileError{Msg: fmt.Sprintf("larger than %d bytes; is it the right file?", maxTokenFileBytes)})
	}
	tokens, err := ParseDiscoveryTokens(data)
	if err != nil {
		return nil, fmt.Errorf("--discovery-token-file %s: %w", o.DiscoveryTokenFile, err)
	}
	return tokens, nil
}

// maxTokenFileBytes bounds --discovery-token-file: a token file is small,
// anything bigger is the wrong file.
const maxTokenFileBytes = 1 << 20

// maxTokenFileErrors bounds the problems reported for one token file, so a
// wrong file (a binary, a log) does not flood the start-up error.
const maxTokenFileErrors = 10

// ErrInvalidTokenFile is matched by every *TokenFileError.
var ErrInvalidTokenFile = errors.New("invalid discovery token file")

// IsInvalidTokenFile reports whether err comes from a malformed discovery
// token file.
func IsInvalidTokenFile(err error) bool { return errors.Is(err, ErrInvalidTokenFile) }

// TokenFileError is one problem of a discovery token file. Msg never holds a
// token, so the error can be logged.
type TokenFileError struct {
	// Line is 1-based; 0 means the file as a whole.
	Line int
	Msg  string
}

func (e *TokenFileError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// Is makes errors.Is(err, ErrInvalidTokenFile) true.
func (e *TokenFileError) Is(target error) bool { return target == ErrInvalidTokenFile }

const badTokenMsg = "the token must be printable ASCII without spaces (it travels in an Authorization header)"

// ParseDiscoveryTokens parses a discovery token file, in the spirit of
// kube-apiserver's static token file: every line that is not blank and does
// not start with '#' is "token,identity" (spaces around either field
// ignored). A token is printable ASCII without spaces or commas; an identity
// is a DNS label (the holder "http:<identity>" and the flows under it must
// stay unambiguous). A token or an identity on two lines is an error: one
// token must mean one identity, and one identity one token so that flows and
// holders name a single client.
//
// For compatibility with single-token files (make dev's .dev/discovery-token),
// a file whose only entry is a line without a comma is that one token with
// identity discovery.DefaultIdentity.
//
// Errors join *TokenFileError values (at most maxTokenFileErrors of them),
// naming lines and identities but never tokens. A file without entries is an
// error: authentication is turned off by configuring no token at all.
func ParseDiscoveryTokens(data []byte) (map[string]string, error) {
	type entry struct {
		line            int
		token, identity string
		hasComma        bool
	}
	var entries []entry
	text := strings.TrimPrefix(string(data), "\ufeff") // a BOM some editors write
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		token, identity, hasComma := strings.Cut(line, ",")
		entries = append(entries, entry{line: i + 1, token: strings.TrimSpace(token), identity: strings.TrimSpace(identity), hasComma: hasComma})
	}
	if len(entries) == 0 {
		return nil, &TokenFileError{Msg: "holds no token (it is empty or only blank lines and # comments); to turn authentication off, configure no token at all"}
	}
	if e := entries[0]; len(entries) == 1 && !e.hasComma {
		if !validToken(e.token) {
			return nil, &TokenFileError{Line: e.line, Msg: badTokenMsg}
		}
		return discovery.SingleToken(e.token), nil
	}

	var problems []error
	add := func(line int, format string, args ...any) {
		problems = append(problems, &TokenFileError{Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	tokens := make(map[string]string, len(entries))
	tokenLine := make(map[string]int, len(entries))
	identityLine := make(map[string]int, len(entries))
	for _, e := range entries {
		switch {
		case !e.hasComma:
			add(e.line, "want token,identity (a bare token is allowed only as the file's single entry)")
			continue
		case strings.Contains(e.identity, ","):
			add(e.line, "want token,identity, found more than one comma")
			continue
		}
		bad := false
		if e.token == "" {
			add(e.line, "empty token")
			bad = true
		} else if !validToken(e.token) {
			add(e.line, "%s", badTokenMsg)
			bad = true
		}
		// The value is not quoted: with the fields swapped it would be a token.
		switch {
		case e.identity == "":
			add(e.line, "empty identity")
			bad = true
		case len(validation.IsDNS1123Label(e.identity)) > 0:
			add(e.line, "the identity must be a DNS label: 1-%d lowercase letters, digits and '-', starting and ending with a letter or digit",
				validation.DNS1123LabelMaxLength)
			bad = true
		case e.identity == discovery.AnonymousIdentity:
			add(e.line, "identity %q is reserved for requests when authentication is off", e.identity)
			bad = true
		}
		if bad {
			continue
		}
		if prev, ok := tokenLine[e.token]; ok {
			add(e.line, "the token of line %d again (a token stands for one identity)", prev)
			continue
		}
		if prev, ok := identityLine[e.identity]; ok {
			add(e.line, "identity %q is already on line %d (one token per identity)", e.identity, prev)
			continue
		}
		tokenLine[e.token], identityLine[e.identity] = e.line, e.line
		tokens[e.token] = e.identity
	}
	if len(problems) > maxTokenFileErrors {
		more := len(problems) - maxTokenFileErrors
		problems = append(problems[:maxTokenFileErrors], &TokenFileError{Msg: fmt.Sprintf("and %d more problems", more)})
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return tokens, nil
}

// validToken: visible ASCII only (0x21-0x7e), what an Authorization header
// carries unchanged.
func validToken(token string) bool {
	if token == "" {
		return false
	}
	for i := 0; i < len(token); i++ {
		if token[i] < 0x21 || token[i] > 0x7e {
			return false
		}
	}
	return true
}

// storeOptions are the lease store's options.
func (o *LeasingOptions) storeOptions() lease.Options {
	return lease.Options{
		MaxLeasesPerProxy: o.MaxLeasesPerProxy,
		MaxTTL:            o.MaxLeaseTTL,
		DefaultTTL:        o.DefaultLeaseTTL,
		CooldownWindow:    o.CooldownWindow,
		SweepInterval:     o.SweepInterval,
	}
}

// validateBindAddress accepts host:port with an optional host and a port in
// 0..65535 (0: any free port).
func validateBindAddress(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port must be a number in 0..65535", addr)
	}
	return nil
}
