package provider_test

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proxy-operator/proxy-operator/pkg/provider"
)

// gcpName is GCP's resource-name syntax, written out here rather than taken
// from the package so the test does not trust the code under test.
var gcpName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

func TestNameFromUIDVectors(t *testing.T) {
	// Computed outside Go: python3 -c 'import hashlib,base64;
	// print("proxy-"+base64.b32encode(hashlib.sha256(u.encode()).digest()).decode().lower()[:16])'
	vectors := []struct {
		uid  types.UID
		want string
	}{
		{"3f1c2a9e-7b4d-4c1e-9a8f-2d6b5e0c1a7b", "proxy-vtz7kdwuvrfrinvt"},
		{"", "proxy-4oymiquy7qobjgx3"},
	}
	for _, v := range vectors {
		if got := provider.NameFromUID(v.uid); got != v.want {
			t.Errorf("NameFromUID(%q) = %q, want %q", v.uid, got, v.want)
		}
	}
}

// independentName encodes differently from the implementation (whole digest,
// padded, lowercased afterwards, then truncated).
func independentName(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return "proxy-" + strings.ToLower(base32.StdEncoding.EncodeToString(sum[:]))[:16]
}

func TestNameFromUIDIsLegalAndDistinct(t *testing.T) {
	seen := map[string]types.UID{}
	for i := range 2000 {
		uid := types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i*7919))
		name := provider.NameFromUID(uid)
		if want := independentName(uid); name != want {
			t.Fatalf("NameFromUID(%q) = %q, independent encoding gives %q", uid, name, want)
		}
		if len(name) != 22 {
			t.Errorf("NameFromUID(%q) = %q: length %d, want 22", uid, name, len(name))
		}
		if !gcpName.MatchString(name) {
			t.Errorf("NameFromUID(%q) = %q: not a legal GCP resource name", uid, name)
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("NameFromUID(%q) = %q: not a DNS-1123 label: %v", uid, name, errs)
		}
		if !provider.ValidName(name) {
			t.Errorf("ValidName(NameFromUID(%q) = %q) = false", uid, name)
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("NameFromUID collision: %q and %q both give %q", prev, uid, name)
		}
		seen[name] = uid
		if again := provider.NameFromUID(uid); again != name {
			t.Errorf("NameFromUID(%q) not deterministic: %q then %q", uid, name, again)
		}
	}
}

// TestNameCheckersRejectIllegalNames is the negative control for the legality
// checks above: they must be able to fail.
func TestNameCheckersRejectIllegalNames(t *testing.T) {
	for _, bad := range []string{"Proxy-abc", "proxy_abc", "-proxy", "proxy-", "1proxy", "", strings.Repeat("a", 64)} {
		if gcpName.MatchString(bad) && len(bad) <= 63 {
			t.Errorf("GCP name check accepts %q", bad)
		}
		if provider.ValidName(bad) {
			t.Errorf("ValidName(%q) = true, want false", bad)
		}
	}
	for _, bad := range []string{"Proxy-abc", "proxy_abc", "-proxy", "proxy-"} {
		if len(validation.IsDNS1123Label(bad)) == 0 {
			t.Errorf("IsDNS1123Label accepts %q", bad)
		}
	}
}

// The tag of an installation is stable, differs between namespaces and
// clusters, and is a label value of Kubernetes and of GCE.
func TestInstallationTag(t *testing.T) {
	a := provider.InstallationTag("cluster-1", "proxy-operator-system")
	if a != provider.InstallationTag("cluster-1", "proxy-operator-system") {
		t.Error("the same installation got two tags")
	}
	gce := regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)
	seen := map[string]string{}
	for _, c := range []types.UID{"cluster-1", "cluster-2"} {
		for _, ns := range []string{"proxy-operator-system", "team-a", "team-b"} {
			tag := provider.InstallationTag(c, ns)
			if msgs := validation.IsValidLabelValue(tag); len(msgs) > 0 || !gce.MatchString(tag) || !strings.HasPrefix(tag, provider.DefaultTag+"-") {
				t.Errorf("tag %q of %s/%s: %v", tag, c, ns, msgs)
			}
			if other, ok := seen[tag]; ok {
				t.Errorf("%s/%s and %s share the tag %q", c, ns, other, tag)
			}
			seen[tag] = string(c) + "/" + ns
		}
	}
	if a == provider.DefaultTag {
		t.Error("an installation's tag is the shared default")
	}
}
