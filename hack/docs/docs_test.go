package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/proxy-operator/proxy-operator/cmd/proxy-operator/app"
)

const root = "../.."

// toolFlags are the flags of other programs the docs show (kubectl, helm,
// curl, pip, go, skopeo, scrapy, nsenter, ctr, the auth helper's Go flags).
var toolFlags = []string{
	// kubectl
	"--all", "--cache-dir", "--dry-run", "--for", "--image", "--kubeconfig", "--namespace", "--restart", "--rm",
	"--server-side", "--timeout", "--wait", "--field-manager", "--raw", "--subresource", "--type", "--patch",
	"--output", "--selector", "--watch", "--from-literal", "--from-file", "--as", "--as-group", "--force-conflicts",
	"--show-labels", "--overwrite", "--replicas", "--field-selector", "--grace-period", "--force",
	// helm
	"--create-namespace", "--set", "--include-crds", "--values", "--strict",
	// gcloud
	"--labels", "--filter", "--format", "--project", "--role", "--member", "--network", "--direction", "--action",
	"--rules", "--target-tags", "--source-ranges",
	// curl, pip, go, skopeo, scrapy
	"--cacert", "--data", "--header", "--proxy", "--no-index", "--no-build-isolation", "--no-deps", "--quiet",
	"--target", "--user", "--break-system-packages", "--version", "--help",
	// cmd/proxy-auth-helper
	"--config", "--install-to", "--listen",
	// nsenter, ctr (make cluster's debugging)
	"--net", "--address",
}

// documents are the files the test reads, relative to the repository root.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "CONTRIBUTING.md", "clients/python/README.md",
		"artifacts/charts/proxy-operator/README.md", "artifacts/charts/proxy-operator/values.yaml"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		out = append(out, rel)
	}
	return out
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	flagRE = regexp.MustCompile("(?:^|[\\s`(\\[\"'=,])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
	// make in inline code or at the start of a command line.
	makeRE   = regexp.MustCompile("(?m)(?:`|^\\s*)make ([a-z][a-z0-9-]*)")
	pathRE   = regexp.MustCompile("(?:^|[\\s`(\\[\"'=:,])((?:apis|artifacts|clients|cmd|docs|examples|hack|pkg|test)/[A-Za-z0-9_./<>*{}$-]*)")
	linkRE   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	targetRE = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// operatorFlags are the flags cmd/proxy-operator defines.
func operatorFlags() map[string]bool {
	fs := pflag.NewFlagSet("proxy-operator", pflag.ContinueOnError)
	app.NewOptions().AddFlags(fs)
	out := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { out["--"+f.Name] = true })
	return out
}

// unknownFlags are the --flags of text that neither the operator nor a
// listed tool defines.
func unknownFlags(text string, known map[string]bool) []string {
	var out []string
	for _, m := range flagRE.FindAllStringSubmatch(text, -1) {
		if f := m[1]; !known[f] && !slices.Contains(toolFlags, f) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// missingPaths are the repository paths text names that do not exist
// (a trailing /..., "…" or punctuation is not part of the path).
func missingPaths(text string, exists func(string) bool) []string {
	var out []string
	for _, m := range pathRE.FindAllStringSubmatch(text, -1) {
		p := strings.TrimSuffix(m[1], "/...")
		p = strings.TrimRight(p, ".,:/")
		if strings.ContainsAny(p, "<*{$") || p == "" {
			continue
		}
		if !exists(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(filepath.Join(root, p))
	return err == nil
}

func TestDocsNameWhatExists(t *testing.T) {
	known := operatorFlags()
	if !known["--lease-checkpoint-secret"] || known["--no-such-flag"] {
		t.Fatalf("the operator's flag set looks wrong: %d flags", len(known))
	}
	makefile := read(t, "Makefile")
	targets := map[string]bool{}
	for _, m := range targetRE.FindAllStringSubmatch(makefile, -1) {
		targets[m[1]] = true
	}
	for _, doc := range documents(t) {
		text := read(t, doc)
		for _, f := range unknownFlags(text, known) {
			t.Errorf("%s names %s, which cmd/proxy-operator does not define (nor a tool listed in toolFlags)", doc, f)
		}
		for _, m := range makeRE.FindAllStringSubmatch(text, -1) {
			if !targets[m[1]] {
				t.Errorf("%s names `make %s`, which the Makefile does not have", doc, m[1])
			}
		}
		for _, p := range missingPaths(text, exists) {
			t.Errorf("%s names %s, which does not exist", doc, p)
		}
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "#") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			link, _, _ = strings.Cut(link, "#")
			if !exists(filepath.Join(filepath.Dir(doc), link)) {
				t.Errorf("%s links to %s, which does not exist", doc, m[1])
			}
		}
	}
}

// The checks catch what they are for: a made-up flag, path and target
// (negative controls of the test above).
func TestChecksCatchDrift(t *testing.T) {
	known := operatorFlags()
	text := "run it with `--lease-checkpoint-secret` and `--lease-checkpint-secret`; see docs/api.md, docs/nope.md and `pkg/lease/...`.\n" +
		"kubectl apply --server-side -f artifacts/install/overlays/nowhere\n"
	if got, want := unknownFlags(text, known), []string{"--lease-checkpint-secret"}; !slices.Equal(got, want) {
		t.Errorf("unknownFlags = %v, want %v", got, want)
	}
	got := missingPaths(text, exists)
	sort.Strings(got)
	if want := []string{"artifacts/install/overlays/nowhere", "docs/nope.md"}; !slices.Equal(got, want) {
		t.Errorf("missingPaths = %v, want %v", got, want)
	}
	if m := makeRE.FindAllStringSubmatch("to make things work, then `make tset`", -1); len(m) != 1 || m[0][1] != "tset" {
		t.Errorf("makeRE found %v, want only tset", m)
	}
}

// The mismatches a newcomer met (#29) stay fixed: each is a rule on one
// file's text.
func TestNewcomerMismatches(t *testing.T) {
	for _, tc := range []struct {
		file, why string
		ok        func(text string) bool
	}{
		{"README.md", "the image is set before the first apply or install",
			func(s string) bool {
				image := strings.Index(s, "newName: registry.example.com")
				helm := strings.Index(s, "--set image.repository=")
				apply := strings.Index(s, "kubectl apply -k")
				install := strings.Index(s, "helm install")
				return image >= 0 && helm >= 0 && image < apply && helm > install && install >= 0 &&
					!strings.Contains(s[install:helm], "\n\n")
			}},
		{"README.md", "the API is not called plain HTTP", func(s string) bool { return !strings.Contains(s, "plain HTTP") }},
		{"README.md", "Go 1.26 is named", func(s string) bool { return strings.Contains(s, "Go 1.26") }},
		{"README.md", "ProxyPool and every example are introduced", func(s string) bool {
			return strings.Contains(s, "ProxyPool") && strings.Contains(s, "examples/client-go-crawler") &&
				strings.Contains(s, "examples/http-crawler") && strings.Contains(s, "examples/scrapy-crawler")
		}},
		{"README.md", "the first lines are the two commands", func(s string) bool {
			head := strings.Join(strings.SplitN(s, "\n", 7)[:6], "\n")
			return strings.Contains(head, "make dev") && strings.Contains(head, "make test")
		}},
		{"docs/api.md", "the token Secret is read again every 30 s (the file once)", func(s string) bool {
			return strings.Contains(s, "`--discovery-token-secret` (the install's) is read again every 30 seconds")
		}},
		{"docs/api.md", "no plain-HTTP claim", func(s string) bool {
			return !regexp.MustCompile(`(?i)serves plain HTTP[^`+"`"+`]*$`).MatchString(s) && strings.Contains(s, "HTTPS only")
		}},
		{"docs/api.md", "every typed check of the Go client is listed", func(s string) bool {
			for _, f := range []string{"IsForbidden", "IsNoRoom", "IsNotLeader", "IsQueueFull"} {
				if !strings.Contains(s, "`"+f+"`") {
					return false
				}
			}
			return strings.Contains(s, "`proxyDraining`")
		}},
		{"docs/python.md", "the quick start names the CA", func(s string) bool {
			i := strings.Index(s, "## Quick start")
			return i >= 0 && strings.Contains(s[i:], "PROXY_OPERATOR_CA_FILE")
		}},
		{"artifacts/apiserver/dev/apiservice.yaml", "the dev APIService verifies the certificate",
			func(s string) bool { return !strings.Contains(s, "insecureSkipTLSVerify: true") }},
		{"examples/http-crawler/doc.go", "the example's URL is HTTPS", func(s string) bool {
			return strings.Contains(s, "https://") && !strings.Contains(s, "http://127.0.0.1:8090")
		}},
		{"docs/gc.md", "the log line shown is JSON, as logged by default", func(s string) bool {
			return strings.Contains(s, `{"level":`)
		}},
	} {
		if !tc.ok(read(t, tc.file)) {
			t.Errorf("%s: %s", tc.file, tc.why)
		}
	}
}

// Every error code of the wire vocabulary is in docs/api.md's table.
func TestErrorTableHasEveryCode(t *testing.T) {
	wire := read(t, "pkg/discovery/wire/wire.go")
	codes := regexp.MustCompile(`(?m)^\s*Code[A-Za-z]+\s*=\s*"([a-z_]+)"`).FindAllStringSubmatch(wire, -1)
	if len(codes) < 10 {
		t.Fatalf("read %d codes from pkg/discovery/wire/wire.go", len(codes))
	}
	api := read(t, "docs/api.md")
	for _, c := range codes {
		if !regexp.MustCompile("(?m)^\\| `" + c[1] + "` \\| [0-9]{3} \\|").MatchString(api) {
			t.Errorf("docs/api.md's error table has no row for %s", c[1])
		}
	}
}
