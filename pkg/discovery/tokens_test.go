package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Tokens in these tests all contain "s3cret", so that a test can check that
// no error message ever holds one.
const secretMark = "s3cret"

// tokenFileErrors flattens a ParseTokens error into its
// *TokenFileError values.
func tokenFileErrors(t *testing.T, err error) []TokenFileError {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []TokenFileError
	for _, e := range errs {
		var tfe *TokenFileError
		if !errors.As(e, &tfe) {
			t.Fatalf("error %q is not a *TokenFileError", e)
		}
		out = append(out, *tfe)
	}
	return out
}

// splitTokens is tokens as token → identity and identity → namespaces
// (scoped identities only); nil for nil.
func splitTokens(tokens Tokens) (map[string]string, map[string][]string) {
	if tokens == nil {
		return nil, nil
	}
	ids := map[string]string{}
	var nss map[string][]string
	for tok, t := range tokens {
		ids[tok] = t.Identity
		if t.Namespaces != nil {
			if nss == nil {
				nss = map[string][]string{}
			}
			nss[t.Identity] = t.Namespaces
		}
	}
	return ids, nss
}

func TestParseTokens(t *testing.T) {
	const (
		notLabel = "the identity must be a DNS label: 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit"
		badToken = "the token must be printable ASCII without spaces (it travels in an Authorization header)"
	)
	tests := []struct {
		name string
		file string
		want map[string]string
		// wantNamespaces are the scoped identities' namespaces.
		wantNamespaces map[string][]string
		wantErr        []TokenFileError
	}{
		{name: "two crawlers", file: "s3cret-a,crawler-a\ns3cret-b,crawler-b\n",
			want: map[string]string{"s3cret-a": "crawler-a", "s3cret-b": "crawler-b"}},
		{name: "comments, blank lines, spaces and CRLF",
			file: "# crawlers outside the cluster\r\n\r\n  s3cret-a , crawler-a \r\n\t# rotated 2026-01\r\ns3cret-b,crawler-b",
			want: map[string]string{"s3cret-a": "crawler-a", "s3cret-b": "crawler-b"}},
		{name: "one entry with a comma keeps its identity", file: "s3cret,crawler-a\n",
			want: map[string]string{"s3cret": "crawler-a"}},
		{name: "single bare token: identity discovery (.dev/discovery-token)", file: "  s3cret\n",
			want: map[string]string{"s3cret": DefaultIdentity}},
		{name: "single bare token after a comment and a BOM", file: "\ufeff# dev\ns3cret\n",
			want: map[string]string{"s3cret": DefaultIdentity}},
		{name: "token with base64 punctuation", file: "s3cret+/=~._-x,a1\n", want: map[string]string{"s3cret+/=~._-x": "a1"}},
		{name: "identity of 63 characters", file: "s3cret," + strings.Repeat("a", 63) + "\n",
			want: map[string]string{"s3cret": strings.Repeat("a", 63)}},

		{name: "empty file", file: "", wantErr: []TokenFileError{{Msg: "holds no token (it is empty or only blank lines and # comments); to turn authentication off, configure no token at all"}}},
		{name: "whitespace only", file: " \n\t\n", wantErr: []TokenFileError{{Msg: "holds no token (it is empty or only blank lines and # comments); to turn authentication off, configure no token at all"}}},
		{name: "comments only", file: "# s3cret,crawler-a\n", wantErr: []TokenFileError{{Msg: "holds no token (it is empty or only blank lines and # comments); to turn authentication off, configure no token at all"}}},
		{name: "single bare token with a space", file: "\ns3cret token\n", wantErr: []TokenFileError{{Line: 2, Msg: badToken}}},
		{name: "bare token among entries", file: "s3cret-a,crawler-a\ns3cret-b\n",
			wantErr: []TokenFileError{{Line: 2, Msg: "want token,identity (a bare token is allowed only as the file's single entry)"}}},
		{name: "two bare tokens", file: "s3cret-a\ns3cret-b\n", wantErr: []TokenFileError{
			{Line: 1, Msg: "want token,identity (a bare token is allowed only as the file's single entry)"},
			{Line: 2, Msg: "want token,identity (a bare token is allowed only as the file's single entry)"}}},
		{name: "namespaces", file: "s3cret-a,crawler-a,team-a\ns3cret-b,crawler-b, team-a ; team-b \ns3cret-c,crawler-c\n",
			want:           map[string]string{"s3cret-a": "crawler-a", "s3cret-b": "crawler-b", "s3cret-c": "crawler-c"},
			wantNamespaces: map[string][]string{"crawler-a": {"team-a"}, "crawler-b": {"team-a", "team-b"}}},
		{name: "four fields", file: "s3cret,crawler-a,team-a,1001\n",
			wantErr: []TokenFileError{{Line: 1, Msg: "want token,identity or token,identity,namespaces, found more than two commas"}}},
		{name: "namespaces field empty", file: "s3cret,crawler-a,\n",
			wantErr: []TokenFileError{{Line: 1, Msg: `namespace "": a namespace name is a DNS label; list them separated by ';' (leave the field out for every namespace)`}}},
		{name: "a namespace that is no DNS label (kube-apiserver's token,user,uid)", file: "s3cret,crawler-a,Team_A\n",
			wantErr: []TokenFileError{{Line: 1, Msg: `namespace "Team_A": a namespace name is a DNS label; list them separated by ';' (leave the field out for every namespace)`}}},
		{name: "a namespace twice", file: "s3cret,crawler-a,team-a;team-a\n",
			wantErr: []TokenFileError{{Line: 1, Msg: `namespace "team-a" listed twice`}}},
		{name: "empty token", file: " ,crawler-a\n", wantErr: []TokenFileError{{Line: 1, Msg: "empty token"}}},
		{name: "empty identity", file: "s3cret,\n", wantErr: []TokenFileError{{Line: 1, Msg: "empty identity"}}},
		{name: "both empty", file: ",\n", wantErr: []TokenFileError{{Line: 1, Msg: "empty token"}, {Line: 1, Msg: "empty identity"}}},
		{name: "token with a space", file: "s3cret token,crawler-a\n", wantErr: []TokenFileError{{Line: 1, Msg: badToken}}},
		{name: "token with a non-ASCII character", file: "s3cret\u00e9,crawler-a\n", wantErr: []TokenFileError{{Line: 1, Msg: badToken}}},
		{name: "token with a control character", file: "s3cret\x00,crawler-a\n", wantErr: []TokenFileError{{Line: 1, Msg: badToken}}},
		{name: "identity with upper case", file: "s3cret,Crawler-A\n", wantErr: []TokenFileError{{Line: 1, Msg: notLabel}}},
		{name: "identity with a slash (would fake a flow)", file: "s3cret,crawler-a/batch\n", wantErr: []TokenFileError{{Line: 1, Msg: notLabel}}},
		{name: "identity with a colon", file: "s3cret,http:crawler-a\n", wantErr: []TokenFileError{{Line: 1, Msg: notLabel}}},
		{name: "identity ending in '-'", file: "s3cret,crawler-\n", wantErr: []TokenFileError{{Line: 1, Msg: notLabel}}},
		{name: "identity of 64 characters", file: "s3cret," + strings.Repeat("a", 64) + "\n", wantErr: []TokenFileError{{Line: 1, Msg: notLabel}}},
		// Fields swapped: the "identity" is the token, so the error must not quote it.
		{name: "fields swapped", file: "crawler-a,S3CRET-TOKEN\n", wantErr: []TokenFileError{{Line: 1, Msg: notLabel}}},
		{name: "reserved identity", file: "s3cret,anonymous\n",
			wantErr: []TokenFileError{{Line: 1, Msg: `identity "anonymous" is reserved for requests when authentication is off`}}},
		{name: "duplicate token", file: "# two crawlers\ns3cret,crawler-a\ns3cret,crawler-b\n",
			wantErr: []TokenFileError{{Line: 3, Msg: "the token of line 2 again (a token stands for one identity)"}}},
		{name: "duplicate identity", file: "s3cret-a,crawler-a\n\ns3cret-b,crawler-a\n",
			wantErr: []TokenFileError{{Line: 3, Msg: `identity "crawler-a" is already on line 1 (one token per identity)`}}},
		{name: "every problem of the file", file: "s3cret-a,crawler-a\ns3cret-a,crawler-b\ns3cret-c,Crawler-C\ns3cret-d,crawler-a\n",
			wantErr: []TokenFileError{
				{Line: 2, Msg: "the token of line 1 again (a token stands for one identity)"},
				{Line: 3, Msg: notLabel},
				{Line: 4, Msg: `identity "crawler-a" is already on line 1 (one token per identity)`}}},
		{name: "problems are capped", file: strings.Repeat("s3cret\n", 12), wantErr: func() []TokenFileError {
			var want []TokenFileError
			for i := 1; i <= 10; i++ {
				want = append(want, TokenFileError{Line: i, Msg: "want token,identity (a bare token is allowed only as the file's single entry)"})
			}
			return append(want, TokenFileError{Msg: "and 2 more problems"})
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTokens([]byte(tt.file))
			ids, nss := splitTokens(got)
			if d := cmp.Diff(tt.want, ids); d != "" {
				t.Errorf("tokens (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantNamespaces, nss); d != "" {
				t.Errorf("namespaces (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantErr, tokenFileErrors(t, err)); d != "" {
				t.Errorf("errors (-want +got):\n%s", d)
			}
			if err == nil {
				return
			}
			if !IsInvalidTokenFile(err) {
				t.Errorf("IsInvalidTokenFile(%q) = false", err)
			}
			if msg := strings.ToLower(err.Error()); strings.Contains(msg, secretMark) {
				t.Errorf("error %q quotes a token", err)
			}
		})
	}
	// Negative controls for the helpers the table relies on.
	if IsInvalidTokenFile(errors.New("line 1: empty token")) {
		t.Error("IsInvalidTokenFile is true for an unrelated error")
	}
	if got := (&TokenFileError{Line: 7, Msg: "empty token"}).Error(); got != "line 7: empty token" {
		t.Errorf("TokenFileError.Error() = %q", got)
	}
}

// DiscoveryTokens picks the source: the file, else the environment, else
// nothing (auth off); a broken file stops start-up.
func TestDiscoveryTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", "  s3cret\n")
	twoFile := write("tokens", "s3cret-a,crawler-a\ns3cret-b,crawler-b\n")
	emptyFile := write("empty", " \n")
	dupFile := write("dup", "s3cret-a,crawler-a\ns3cret-a,crawler-b\n")
	hugeFile := write("huge", "s3cret,crawler-a\n"+strings.Repeat("#", maxTokenFileBytes))
	tests := []struct {
		name    string
		file    string
		env     string
		want    map[string]string
		wantErr string
	}{
		{name: "bare token file, whitespace trimmed", file: tokenFile, want: map[string]string{"s3cret": "discovery"}},
		{name: "file of two tokens", file: twoFile, want: map[string]string{"s3cret-a": "crawler-a", "s3cret-b": "crawler-b"}},
		{name: "file wins over the environment", file: twoFile, env: "s3cret-env",
			want: map[string]string{"s3cret-a": "crawler-a", "s3cret-b": "crawler-b"}},
		{name: "environment when no file", env: " s3cret-env ", want: map[string]string{"s3cret-env": "discovery"}},
		{name: "neither: auth off"},
		{name: "whitespace environment: auth off", env: " \t"},
		{name: "empty file is an error, not auth off", file: emptyFile, wantErr: "--discovery-token-file " + emptyFile + ": holds no token"},
		{name: "duplicate token names its line", file: dupFile, wantErr: "--discovery-token-file " + dupFile + ": line 2: the token of line 1 again"},
		{name: "missing file", file: filepath.Join(dir, "missing"), wantErr: "reading --discovery-token-file"},
		{name: "file over the size limit", file: hugeFile, wantErr: "larger than 1048576 bytes"},
		{name: "environment is one token, not a line", env: "s3cret,crawler-a",
			wantErr: "$PROXY_OPERATOR_DISCOVERY_TOKEN holds one bare token (identity \"discovery\") and must not contain a comma"},
		{name: "environment token with a space", env: "s3cret token", wantErr: "$PROXY_OPERATOR_DISCOVERY_TOKEN: the token must be printable ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultServingOptions()
			o.TokenFile = tt.file
			getenv := func(k string) string {
				if k == TokenEnv {
					return tt.env
				}
				return ""
			}
			got, err := o.Tokens(getenv)
			if ids, _ := splitTokens(got); !cmp.Equal(tt.want, ids) {
				d := cmp.Diff(tt.want, ids)
				t.Errorf("tokens (-want +got):\n%s", d)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
			}
			if strings.Contains(strings.ToLower(err.Error()), secretMark) {
				t.Errorf("error %q quotes a token", err)
			}
		})
	}
}

// The token file shown in docs/api.md is one the operator accepts.
func TestDocsTokenFileExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```text\n")
	example, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/api.md has no ```text block with the token file example")
	}
	tokens, err := ParseTokens([]byte(example))
	if err != nil {
		t.Fatalf("the documented token file is rejected: %v", err)
	}
	if d := cmp.Diff([]string{"crawler-a", "crawler-b"}, Identities(tokens)); d != "" {
		t.Errorf("identities of the documented token file (-want +got):\n%s", d)
	}
}
