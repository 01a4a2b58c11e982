package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image.
const (
	BinaryPath = "/usr/local/bin/proxy-operator"
	// HelperPath is the proxy auth helper, where the kubernetes provider's
	// init container runs it from.
	HelperPath = "/proxy-auth-helper"
	// helperDir is the helper's main package, beside the operator's.
	helperDir   = "proxy-auth-helper"
	CertsPath   = "/etc/ssl/certs/ca-certificates.crt"
	NonRootUser = "65532"
	versionPkg  = "github.com/proxy-operator/proxy-operator/pkg/version"
	sourceURL   = "https://github.com/proxy-operator/proxy-operator"
)

// Options say what to build.
type Options struct {
	// Platforms are GOOS/GOARCH pairs.
	Platforms []string
	// Version and Revision are stamped into the binary and the labels.
	Version, Revision string
	// Epoch is every timestamp of the image (SOURCE_DATE_EPOCH).
	Epoch time.Time
	// CACerts is the CA bundle copied into the image.
	CACerts string
	// Package is the main package to build.
	Package string
	// WorkDir holds the built binaries.
	WorkDir string
}

func main() {
	var o Options
	var platforms, out, tarPath string
	var epoch int64
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated GOOS/GOARCH")
	flag.StringVar(&out, "out", "bin/image", "directory of the OCI image layout to write (replaced)")
	flag.StringVar(&tarPath, "tar", "", "also write the image of the first platform as a docker-loadable tarball here")
	flag.StringVar(&o.Version, "version", "dev", "version stamped into the binary and the labels")
	flag.StringVar(&o.Revision, "revision", "", "source revision stamped into the binary and the labels")
	flag.Int64Var(&epoch, "epoch", 0, "Unix time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put into the image")
	flag.StringVar(&o.Package, "package", "./cmd/proxy-operator", "main package to build")
	kind := flag.String("image", "operator", "which image: operator, or one for this machine's architecture from its files: "+strings.Join(hostImageNames(), ", "))
	binary := flag.String("binary", "", "-image binary: the static binary the image runs")
	user := flag.String("user", "0:0", "-image binary: the user it runs as")
	ref := flag.String("ref", "", "image reference written into the -tar tarball (what `ctr images import` names it)")
	flag.Parse()
	if epoch == 0 {
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			if _, err := fmt.Sscan(s, &epoch); err != nil {
				fatal(fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err))
			}
		}
	}
	o.Epoch = time.Unix(epoch, 0).UTC()
	o.Platforms = strings.Split(platforms, ",")
	if *kind != "operator" {
		if err := writeHostImage(*kind, *binary, *user, *ref, tarPath, o); err != nil {
			fatal(err)
		}
		return
	}
	work, err := os.MkdirTemp("", "proxy-operator-image-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	o.WorkDir = work

	idx, images, err := Build(o)
	if err != nil {
		fatal(err)
	}
	if err := os.RemoveAll(out); err != nil {
		fatal(err)
	}
	if _, err := layout.Write(out, idx); err != nil {
		fatal(fmt.Errorf("writing the OCI layout: %w", err))
	}
	digest, err := idx.Digest()
	if err != nil {
		fatal(err)
	}
	fmt.Printf("%s: OCI image index %s (%s)\n", out, digest, strings.Join(o.Platforms, ", "))
	if tarPath != "" {
		if err := writeTarball(tarPath, *ref, images[0]); err != nil {
			fatal(err)
		}
		fmt.Printf("%s: %s image tarball\n", tarPath, o.Platforms[0])
	}
}

// writeHostImage builds one of the images from this machine's files into
// a tarball.
func writeHostImage(kind, binary, user, ref, tarPath string, o Options) error {
	var h hostImage
	switch kind {
	case "squid":
		h = squidImage()
	case "toolbox":
		h = toolboxImage()
	case "binary":
		if binary == "" {
			return errors.New("-image binary needs -binary")
		}
		h = binaryImage(binary, user)
	default:
		return fmt.Errorf("-image %q: want operator, %s", kind, strings.Join(hostImageNames(), ", "))
	}
	if tarPath == "" {
		return fmt.Errorf("-image %s needs -tar", kind)
	}
	img, err := buildHostImage(h, "/", o.Epoch, o.Version, o.Revision)
	if err != nil {
		return err
	}
	if err := writeTarball(tarPath, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s image %s %s\n", tarPath, kind, ref, digest)
	return nil
}

// writeTarball writes img as a docker-loadable tarball, named ref when
// given.
func writeTarball(tarPath, ref string, img v1.Image) error {
	var tag name.Reference
	if ref != "" {
		t, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("-ref %q: %w", ref, err)
		}
		tag = t
	}
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", tarPath, err)
	}
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}

// Build builds one image per platform and the index over them.
func Build(o Options) (v1.ImageIndex, []v1.Image, error) {
	if len(o.Platforms) == 0 {
		return nil, nil, errors.New("no platform")
	}
	certs, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA bundle: %w", err)
	}
	base, err := baseLayer(certs, o.Epoch)
	if err != nil {
		return nil, nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var images []v1.Image
	for _, p := range o.Platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" {
			return nil, nil, fmt.Errorf("platform %q: want linux/<arch>", p)
		}
		bin, err := buildBinary(o, o.Package, goarch)
		if err != nil {
			return nil, nil, err
		}
		helper, err := buildBinary(o, helperPackage(o.Package), goarch)
		if err != nil {
			return nil, nil, err
		}
		img, err := image(o, goarch, base, bin, helper)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p, err)
		}
		images = append(images, img)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: goos, Architecture: goarch}},
		})
	}
	return idx, images, nil
}

// helperPackage is the helper's main package beside mainPkg
// ("./cmd/proxy-operator" gives "./cmd/proxy-auth-helper").
func helperPackage(mainPkg string) string {
	pkg := filepath.Join(filepath.Dir(mainPkg), helperDir)
	if strings.HasPrefix(mainPkg, "./") {
		// Relative to the working directory, not an import path.
		return "./" + pkg
	}
	return pkg
}

// buildBinary builds a static, reproducible binary of pkg for goarch.
func buildBinary(o Options, pkg, goarch string) (string, error) {
	out := filepath.Join(o.WorkDir, filepath.Base(pkg)+"-"+goarch)
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.version=%s -X %s.revision=%s", versionPkg, o.Version, versionPkg, o.Revision)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build for linux/%s: %w\n%s", goarch, err, stderr.String())
	}
	return out, nil
}

// entry is one file or directory of a layer.
type entry struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
	dir      bool
	// link, when set, makes the entry a symlink to it.
	link string
}

// layerOf writes entries, in the order given, with every timestamp at epoch.
func layerOf(entries []entry, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch, Format: tar.FormatPAX,
			Typeflag: tar.TypeReg, Size: int64(len(e.data)),
		}
		switch {
		case e.dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		case e.link != "":
			h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, e.link
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// baseLayer is what every platform shares: the users, the CA bundle, a home
// and /tmp.
func baseLayer(certs []byte, epoch time.Time) (v1.Layer, error) {
	return layerOf([]entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(CertsPath, "/"), mode: 0o644, data: certs},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
	}, epoch)
}

func image(o Options, goarch string, base v1.Layer, binPath, helperPath string) (v1.Image, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	helper, err := os.ReadFile(helperPath)
	if err != nil {
		return nil, err
	}
	app, err := layerOf([]entry{
		// What a Squid pod's init container copies (--install-to).
		{name: strings.TrimPrefix(HelperPath, "/"), mode: 0o755, data: helper},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: bin},
	}, o.Epoch)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: o.Epoch}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "hack/image: users, CA certificates", Comment: "base"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "hack/image: go build " + o.Package}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", goarch, created
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.User = NonRootUser + ":" + NonRootUser
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=" + CertsPath}
	cf.Config.Labels = ociLabels("proxy-operator", o.Version, o.Revision, o.Epoch)
	return mutate.ConfigFile(img, cf)
}

// ociLabels are the OCI annotations of every image this command builds.
func ociLabels(title, version, revision string, epoch time.Time) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.source":   sourceURL,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
	}
}
