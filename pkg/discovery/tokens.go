package discovery

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TokenEnv holds the discovery API's one bearer token (identity
// DefaultIdentity) when --discovery-token-file is not set. A token never goes
// on the command line, where every user of the machine can read it.
const TokenEnv = "PROXY_OPERATOR_DISCOVERY_TOKEN"

// Tokens returns the bearer tokens the discovery API accepts, each
// mapped to the identity it stands for (the lease holder "http:<identity>"
// and the default fairness flow): the entries of --discovery-token-file
// (ParseTokens), else $PROXY_OPERATOR_DISCOVERY_TOKEN (read through
// getenv) as one token of identity DefaultIdentity, else nil
// (authentication off). A token file that is set but unreadable, empty or
// malformed is an error rather than a silent "auth off". No error holds a
// token.
func (o *ServingOptions) Tokens(getenv func(string) string) (Tokens, error) {
	if o.TokenFile == "" {
		token := strings.TrimSpace(getenv(TokenEnv))
		if token == "" {
			return nil, nil
		}
		if strings.Contains(token, ",") {
			return nil, fmt.Errorf("$%s holds one bare token (identity %q) and must not contain a comma; for token,identity lines use --discovery-token-file",
				TokenEnv, DefaultIdentity)
		}
		if !validToken(token) {
			return nil, fmt.Errorf("$%s: %s", TokenEnv, badTokenMsg)
		}
		return SingleToken(token), nil
	}
	f, err := os.Open(o.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading --discovery-token-file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading --discovery-token-file: %w", err)
	}
	if len(data) > maxTokenFileBytes {
		return nil, fmt.Errorf("--discovery-token-file %s: %w", o.TokenFile,
			&TokenFileError{Msg: fmt.Sprintf("larger than %d bytes; is it the right file?", maxTokenFileBytes)})
	}
	tokens, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("--discovery-token-file %s: %w", o.TokenFile, err)
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

// ParseTokens parses a discovery token file, in the spirit of
// kube-apiserver's static token file: every line that is not blank and does
// not start with '#' is "token,identity" or "token,identity,namespaces"
// (spaces around any field ignored), namespaces being one or more namespace
// names separated by ';': the only namespaces the identity may lease in and
// list (without them, every namespace). A token is printable ASCII without spaces or commas; an identity
// is a DNS label (the holder "http:<identity>" and the flows under it must
// stay unambiguous). A token or an identity on two lines is an error: one
// token must mean one identity, and one identity one token so that flows and
// holders name a single client.
//
// For compatibility with single-token files (make dev's .dev/discovery-token),
// a file whose only entry is a line without a comma is that one token with
// identity DefaultIdentity.
//
// Errors join *TokenFileError values (at most maxTokenFileErrors of them),
// naming lines and identities but never tokens. A file without entries is an
// error: authentication is turned off by configuring no token at all.
func ParseTokens(data []byte) (Tokens, error) {
	type entry struct {
		line                        int
		token, identity, namespaces string
		hasComma, scoped            bool
	}
	var entries []entry
	text := strings.TrimPrefix(string(data), "\ufeff") // a BOM some editors write
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		token, rest, hasComma := strings.Cut(line, ",")
		identity, namespaces, scoped := strings.Cut(rest, ",")
		entries = append(entries, entry{line: i + 1, token: strings.TrimSpace(token), identity: strings.TrimSpace(identity),
			namespaces: strings.TrimSpace(namespaces), hasComma: hasComma, scoped: scoped})
	}
	if len(entries) == 0 {
		return nil, &TokenFileError{Msg: "holds no token (it is empty or only blank lines and # comments); to turn authentication off, configure no token at all"}
	}
	if e := entries[0]; len(entries) == 1 && !e.hasComma {
		if !validToken(e.token) {
			return nil, &TokenFileError{Line: e.line, Msg: badTokenMsg}
		}
		return SingleToken(e.token), nil
	}

	var problems []error
	add := func(line int, format string, args ...any) {
		problems = append(problems, &TokenFileError{Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	tokens := make(Tokens, len(entries))
	tokenLine := make(map[string]int, len(entries))
	identityLine := make(map[string]int, len(entries))
	for _, e := range entries {
		switch {
		case !e.hasComma:
			add(e.line, "want token,identity (a bare token is allowed only as the file's single entry)")
			continue
		case strings.Contains(e.namespaces, ","):
			add(e.line, "want token,identity or token,identity,namespaces, found more than two commas")
			continue
		}
		nss, nsProblem := parseNamespaces(e.namespaces, e.scoped)
		if nsProblem != "" {
			add(e.line, "%s", nsProblem)
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
		case e.identity == AnonymousIdentity:
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
		tokens[e.token] = Token{Identity: e.identity, Namespaces: nss}
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

// parseNamespaces reads a token line's third field: ';'-separated
// namespace names, at least one, none twice ("" and no field: every
// namespace, nil). problem says what is wrong, if anything.
func parseNamespaces(field string, present bool) (nss []string, problem string) {
	if !present {
		return nil, ""
	}
	for ns := range strings.SplitSeq(field, ";") {
		ns = strings.TrimSpace(ns)
		switch {
		case len(validation.IsDNS1123Label(ns)) > 0:
			return nil, fmt.Sprintf("namespace %q: a namespace name is a DNS label; list them separated by ';' (leave the field out for every namespace)", ns)
		case slices.Contains(nss, ns):
			return nil, fmt.Sprintf("namespace %q listed twice", ns)
		}
		nss = append(nss, ns)
	}
	return nss, ""
}

// Identities lists the identities of tokens, sorted, for logs: never the
// tokens themselves.
func Identities(tokens Tokens) []string {
	ids := make([]string, 0, len(tokens))
	for _, t := range tokens {
		ids = append(ids, t.Identity)
	}
	slices.Sort(ids)
	return ids
}
