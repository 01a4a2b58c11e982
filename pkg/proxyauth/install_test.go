package proxyauth

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The init container's copy is the running executable, byte for byte,
// executable by all (Squid runs it as its own user).
func TestInstallSelf(t *testing.T) {
	dir := t.TempDir()
	if err := InstallSelf(dir); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(self))
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the copy differs from the executable (%d bytes, want %d)", len(got), len(want))
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm()&0o555 != 0o555 {
		t.Errorf("mode %v (%v), want executable and readable by all", fi.Mode(), err)
	}
	if err := InstallSelf(filepath.Join(dir, "missing")); err == nil {
		t.Error("installing into a missing directory succeeded")
	}
}
