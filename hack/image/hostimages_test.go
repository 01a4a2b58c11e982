package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestRootfs collects a fake machine's files: paths through /lib land in
// /usr/lib (merged /usr, its symlinks in the image), symlinks stay
// symlinks with their targets collected, parents come before children, and
// directories are copied whole.
func TestRootfs(t *testing.T) {
	host := t.TempDir()
	mk := func(p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(host, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(host, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(host, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/lib/x86_64-linux-gnu/libfoo.so.1.2", "foo")
	link("usr/lib/x86_64-linux-gnu/libfoo.so.1", "libfoo.so.1.2")
	mk("usr/share/data/a", "a")
	mk("usr/share/data/sub/b", "b")
	link("usr/share/errors", "data")
	r := newRootfs(host)
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libfoo.so.1", "/usr/share/errors"} {
		if err := r.addFile(p); err != nil {
			t.Fatal(err)
		}
	}
	// The same library through /lib (as ldd names it) is the same file in
	// the image: no second entry.
	if err := r.addFile("/lib/x86_64-linux-gnu/libfoo.so.1.2"); err != nil {
		t.Error(err)
	}
	var got []string
	for _, e := range r.entries() {
		kind := "file " + string(e.data)
		switch {
		case e.dir:
			kind = "dir"
		case e.link != "":
			kind = "-> " + e.link
		}
		got = append(got, e.name+" "+kind)
	}
	want := []string{
		"bin -> usr/bin",
		"lib -> usr/lib",
		"lib64 -> usr/lib64",
		"sbin -> usr/sbin",
		"usr/ dir",
		"usr/lib/ dir",
		"usr/lib/x86_64-linux-gnu/ dir",
		"usr/lib/x86_64-linux-gnu/libfoo.so.1 -> libfoo.so.1.2",
		"usr/lib/x86_64-linux-gnu/libfoo.so.1.2 file foo",
		"usr/share/ dir",
		"usr/share/data/ dir",
		"usr/share/data/a file a",
		"usr/share/data/sub/ dir",
		"usr/share/data/sub/b file b",
		"usr/share/errors -> data",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

func TestInImage(t *testing.T) {
	for in, want := range map[string]string{
		"/lib/x86_64-linux-gnu/libc.so.6": "usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib64/ld-linux-x86-64.so.2":     "usr/lib64/ld-linux-x86-64.so.2",
		"/bin/busybox":                    "usr/bin/busybox",
		"/usr/sbin/squid":                 "usr/sbin/squid",
		"/etc/squid/errorpage.css":        "etc/squid/errorpage.css",
		"/library/x":                      "library/x",
	} {
		if got := inImage(in); got != want {
			t.Errorf("inImage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSharedLibrariesOfAStaticBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "static")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/static")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	libs, err := sharedLibraries(bin)
	if err != nil || len(libs) != 0 {
		t.Errorf("sharedLibraries(static) = %v, %v; want none", libs, err)
	}
	// The negative control: a dynamic executable of this machine has some.
	libs, err = sharedLibraries("/bin/sh")
	if err != nil || len(libs) == 0 {
		t.Errorf("sharedLibraries(/bin/sh) = %v, %v; want its libraries", libs, err)
	}
}

// TestSquidImage builds the Squid image from this machine's Debian package
// (make test-unit installs it): the same packages and epoch give the same
// digest, it runs as proxy (13) what the pod spec runs, it holds every
// library Squid loads, and, unpacked, its Squid accepts its own
// configuration.
func TestSquidImage(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/squid"); err != nil {
		t.Fatalf("Debian's squid is not installed (make squid): %v", err)
	}
	img, err := buildHostImage(squidImage(), "/", testEpoch, "v0.0.1-test", "0123abc")
	if err != nil {
		t.Fatal(err)
	}
	again, err := buildHostImage(squidImage(), "/", testEpoch, "v0.0.1-test", "0123abc")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digestOf(t, img), digestOf(t, again); a != b {
		t.Errorf("two builds: %s and %s", a, b)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/usr/sbin/squid", "-NYC", "-f", SquidConfPath}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if cf.Config.User != "13:13" {
		t.Errorf("user %q, want 13:13", cf.Config.User)
	}
	if cf.Config.Labels["org.debian.package.squid"] == "" {
		t.Errorf("no Debian package version in the labels: %v", cf.Config.Labels)
	}
	root := unpack(t, img)
	libs, err := sharedLibraries("/usr/sbin/squid")
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range append(libs, "/usr/sbin/squid", "/usr/lib/squid/unlinkd", "/usr/share/squid/errors/templates/ERR_ACCESS_DENIED", SquidConfPath) {
		if _, err := os.Stat(filepath.Join(root, lib)); err != nil {
			t.Errorf("%s is not in the image: %v", lib, err)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	out, err := exec.Command("chroot", root, "/usr/sbin/squid", "-k", "parse", "-f", SquidConfPath).CombinedOutput()
	if err != nil {
		t.Errorf("squid -k parse in the image: %v\n%s", err, out)
	}
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// unpack writes the image's files (regular files, directories and
// symlinks) into a new directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, h.Name)
			if !strings.HasPrefix(p, root+string(filepath.Separator)) {
				t.Fatalf("entry %q leaves the root", h.Name)
			}
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, 0o755)
			case tar.TypeSymlink:
				err = os.Symlink(h.Linkname, p)
			case tar.TypeReg:
				var data []byte
				if data, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, data, os.FileMode(h.Mode)&0o777)
				}
			default:
				err = fmt.Errorf("unexpected entry type %c", h.Typeflag)
			}
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
		}
		rc.Close()
	}
	return root
}
