package proxylease

import (
	"testing"

	"github.com/google/uuid"
)

// A lease's UID is a version-5 UUID in the canonical form, the same for a
// lease ID every time.
func TestUIDForIsACanonicalUUID(t *testing.T) {
	for _, id := range []string{"a", "0123456789abcdef0123456789abcdef"} {
		got := string(uidFor(id))
		parsed, err := uuid.Parse(got)
		if err != nil || parsed.String() != got || parsed.Version() != 5 || parsed.Variant() != uuid.RFC4122 {
			t.Errorf("uidFor(%q) = %q: %v (version %v, variant %v)", id, got, err, parsed.Version(), parsed.Variant())
		}
		if again := string(uidFor(id)); again != got {
			t.Errorf("uidFor(%q) changed: %q then %q", id, got, again)
		}
	}
	if uidFor("a") == uidFor("b") {
		t.Error("two leases, one UID")
	}
}
