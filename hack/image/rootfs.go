package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// rootfs collects files of this machine (a Debian package's, and the
// shared libraries its executables load) into the entries of one layer, at
// the same paths. Debian's merged /usr is kept: /lib, /lib64, /bin and
// /sbin are symlinks into /usr, so a path through either resolves.
type rootfs struct {
	// hostRoot is where host paths are read from ("/" but in tests).
	hostRoot string
	files    map[string]entry
}

func newRootfs(hostRoot string) *rootfs {
	r := &rootfs{hostRoot: hostRoot, files: map[string]entry{}}
	for _, l := range []struct{ name, target string }{
		{"bin", "usr/bin"}, {"sbin", "usr/sbin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"},
	} {
		r.add(entry{name: l.name, mode: 0o777, link: l.target})
	}
	return r
}

// inImage is the canonical in-image path of a host path: through the
// merged-/usr symlinks, as the image lays them out.
func inImage(p string) string {
	p = strings.TrimPrefix(path.Clean(p), "/")
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		if p == top || strings.HasPrefix(p, top+"/") {
			return "usr/" + p
		}
	}
	return p
}

func (r *rootfs) add(e entry) {
	r.dirsOf(e.name)
	r.files[e.name] = e
}

// dirsOf adds the parent directories of name.
func (r *rootfs) dirsOf(name string) {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := r.files[d+"/"]; ok {
			return
		}
		r.files[d+"/"] = entry{name: d + "/", mode: 0o755, dir: true}
	}
}

// addFile copies the host file p (following symlinks, which are kept as
// symlinks in the image) with its mode.
func (r *rootfs) addFile(p string) error {
	name := inImage(p)
	if _, ok := r.files[name]; ok {
		return nil
	}
	host := filepath.Join(r.hostRoot, p)
	fi, err := os.Lstat(host)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(host)
		if err != nil {
			return err
		}
		r.add(entry{name: name, mode: 0o777, link: target})
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		return r.addFile(target)
	}
	if fi.IsDir() {
		return r.addTree(p)
	}
	data, err := os.ReadFile(host)
	if err != nil {
		return err
	}
	r.add(entry{name: name, mode: int64(fi.Mode().Perm()), data: data})
	return nil
}

// addTree copies the directory p and everything under it.
func (r *rootfs) addTree(p string) error {
	host := filepath.Join(r.hostRoot, p)
	return filepath.WalkDir(host, func(h string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(r.hostRoot, h)
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := inImage("/"+rel) + "/"
			r.dirsOf(name)
			r.files[name] = entry{name: name, mode: 0o755, dir: true}
			return nil
		}
		return r.addFile("/" + rel)
	})
}

// addExecutable copies the executable p and every shared library it loads
// (as ldd resolves them on this machine).
func (r *rootfs) addExecutable(p string) error {
	if err := r.addFile(p); err != nil {
		return err
	}
	libs, err := sharedLibraries(filepath.Join(r.hostRoot, p))
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	for _, lib := range libs {
		if err := r.addFile(lib); err != nil {
			return fmt.Errorf("%s needs %s: %w", p, lib, err)
		}
	}
	return nil
}

// sharedLibraries are the paths ldd prints for the executable at p: none
// for a static binary.
func sharedLibraries(p string) ([]string, error) {
	out, err := exec.Command("ldd", p).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd: %w: %s", err, out)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x…)"; vdso has no path.
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "/") {
			if strings.Contains(line, "not found") {
				return nil, fmt.Errorf("ldd: %s", line)
			}
			continue
		}
		libs = append(libs, f[0])
	}
	return libs, nil
}

// entries are the collected files in path order (a directory before what
// it holds), so the layer is the same for the same files.
func (r *rootfs) entries() []entry {
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]entry, 0, len(names))
	for _, n := range names {
		out = append(out, r.files[n])
	}
	return out
}
