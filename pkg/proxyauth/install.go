package proxyauth

import (
	"fmt"
	"os"
	"path/filepath"
)

// InstallSelf copies the running executable (the helper) into dir,
// executable by all: a Squid pod's init container puts it where Squid
// starts it from.
func InstallSelf(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return fmt.Errorf("reading %s: %w", self, err)
	}
	dst := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return fmt.Errorf("installing into %s: %w", dir, err)
	}
	return nil
}
