package apiserver

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// memoryFile holds data in an anonymous memory file (memfd_create) and
// returns a path any open(2) in this process reads it from, each time from
// the start, and a func that closes it. Nothing touches a file system, so it
// works on a read-only root; close-on-exec keeps it from child processes.
func memoryFile(name string, data []byte) (string, func(), error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return "", nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return "", nil, fmt.Errorf("writing the memory file: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), func() { _ = f.Close() }, nil
}
