//go:build !linux

package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
)

// memoryFile writes data in a new private directory under the temporary
// directory (no memfd_create outside Linux) and returns its path and a func
// that removes it.
func memoryFile(name string, data []byte) (string, func(), error) {
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return "", nil, fmt.Errorf("creating a private directory: %w", err)
	}
	remove := func() { _ = os.RemoveAll(dir) }
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		remove()
		return "", nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return path, remove, nil
}
