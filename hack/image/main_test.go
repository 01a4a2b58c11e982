package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/test/ports"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/proxy-operator/proxy-operator/test/controlplane"
	"github.com/proxy-operator/proxy-operator/test/framework"
)

var testEpoch = time.Unix(1700000000, 0).UTC()

func testOptions(t *testing.T, epoch time.Time) Options {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(certs, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Options{
		Platforms: []string{"linux/" + goarch(t)}, Version: "v0.0.1-test", Revision: "0123abc",
		Epoch: epoch, CACerts: certs, Package: filepath.Join(root, "cmd", "proxy-operator"), WorkDir: t.TempDir(),
	}
}

// goarch is the machine's architecture: its binary is the one the tests run.
func goarch(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// build builds the image of o (the operator binary comes from the Go build
// cache after the first time).
func build(t *testing.T, o Options) (v1.ImageIndex, v1.Image) {
	t.Helper()
	idx, imgs, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	return idx, imgs[0]
}

// TestImage builds the image once and checks it: reproducible, what a
// cluster expects of it, and a binary that runs the operator. (Each build
// compresses the whole binary: sharing one keeps the test quick.)
func TestImage(t *testing.T) {
	idx, img := build(t, testOptions(t, testEpoch))
	t.Run("reproducible", func(t *testing.T) { imageIsReproducible(t, idx) })
	t.Run("contents", func(t *testing.T) { imageContents(t, idx, img) })
	t.Run("the binary runs the operator", func(t *testing.T) { imageBinaryRunsTheOperator(t, img) })
}

// The same source, version and epoch give the same digest; another epoch
// gives another (the negative control: the comparison can see a difference).
func imageIsReproducible(t *testing.T, idx v1.ImageIndex) {
	digest := func(idx v1.ImageIndex) v1.Hash {
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(idx)
	again, _ := build(t, testOptions(t, testEpoch))
	if d := digest(again); d != first {
		t.Errorf("two builds of one source: %s and %s", first, d)
	}
	other, _ := build(t, testOptions(t, testEpoch.Add(time.Second)))
	if d := digest(other); d == first {
		t.Errorf("another epoch gave the same digest %s", d)
	}
}

// layerFiles lists a layer's entries: name → (mode, uid, mtime, size).
func layerFiles(t *testing.T, l v1.Layer) map[string]string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(testEpoch) {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		out[h.Name] = fmt.Sprintf("%o uid=%d", h.Mode, h.Uid)
	}
}

// extractBinary writes the image's operator binary to a file.
func extractBinary(t *testing.T, img v1.Image) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the last layer: %v", BinaryPath, err)
		}
		if "/"+h.Name != BinaryPath {
			continue
		}
		path := filepath.Join(t.TempDir(), "proxy-operator")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return path
	}
}

// The image is what a cluster expects of an operator image: OCI media
// types, a non-root user, the binary as entrypoint, labels naming the
// version, CA certificates, and a binary that reports its stamped version.
func imageContents(t *testing.T, idx v1.ImageIndex, img v1.Image) {
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 1 || im.Manifests[0].Platform.Architecture != goarch(t) {
		t.Errorf("index %+v", im)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{BinaryPath}, cf.Config.Entrypoint); d != "" {
		t.Errorf("entrypoint (-want +got):\n%s", d)
	}
	if cf.Config.User != "65532:65532" || cf.OS != "linux" || !cf.Created.Time.Equal(testEpoch) {
		t.Errorf("config: user %q, os %q, created %v", cf.Config.User, cf.OS, cf.Created)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version": "v0.0.1-test", "org.opencontainers.image.revision": "0123abc",
		"org.opencontainers.image.source": sourceURL,
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%d layers (%v), want 2", len(layers), err)
	}
	base := layerFiles(t, layers[0])
	for name, want := range map[string]string{
		"etc/passwd": "644 uid=0", "etc/ssl/certs/ca-certificates.crt": "644 uid=0",
		"home/nonroot/": "700 uid=65532", "tmp/": "1777 uid=0",
	} {
		if got := base[name]; got != want {
			t.Errorf("base layer %s: %q, want %q", name, got, want)
		}
	}
	app := layerFiles(t, layers[1])
	if got := app[strings.TrimPrefix(BinaryPath, "/")]; got != "755 uid=0" {
		t.Errorf("binary: %q", got)
	}
	// The Squid pods' init container runs it from there (--install-to).
	if got := app[strings.TrimPrefix(HelperPath, "/")]; got != "755 uid=0" {
		t.Errorf("proxy auth helper %s: %q", HelperPath, got)
	}
	if helperPackage("./cmd/proxy-operator") != "./cmd/proxy-auth-helper" {
		t.Errorf("helper package of ./cmd/proxy-operator: %q", helperPackage("./cmd/proxy-operator"))
	}

	bin := extractBinary(t, img)
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "proxy-operator v0.0.1-test (revision 0123abc") {
		t.Errorf("--version: %v %q", err, out)
	}
	// Static: no dynamic loader needed (the image has none).
	if out, err := exec.Command("file", bin).CombinedOutput(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Errorf("not a static binary: %s", out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := ports.One()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The binary taken out of the image runs the operator against a real
// control plane: it becomes ready and serves its metrics.
func imageBinaryRunsTheOperator(t *testing.T, img v1.Image) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	bin := extractBinary(t, img)
	probe, metrics := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin,
		"--kubeconfig="+cp.KubeconfigPath, "--namespace=default", "--providers=kubernetes",
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probe), "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metrics),
		"--discovery-bind-address=0", "--apiserver-secure-port=0", "--gc-interval=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs := &framework.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator from the image never became ready:\n%s", logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "proxy_operator_proxies") {
		t.Errorf("metrics without proxy_operator_proxies:\n%.500s", body)
	}
	if !strings.Contains(logs.String(), "v0.0.1-test") {
		t.Errorf("the start-up log does not name the version:\n%.2000s", logs)
	}
}
