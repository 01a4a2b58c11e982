package main

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/proxy-operator/proxy-operator/pkg/proxyauth"
)

// The images besides the operator's. They are built from this machine's
// files, for its own architecture: Squid from Debian's package, a toolbox
// for tests, and one static binary (the cluster's pause, DNS and
// NetworkPolicy agent). The same packages and epoch give the same digest.
const (
	// SquidUID is "proxy" of Debian's package, whom the Squid pod runs as
	// (pkg/provider/kubernetes.SquidUID).
	SquidUID = 13
	// SquidConfPath is the configuration Squid starts on when a Proxy
	// has no credentials (with credentials the pod starts it on its
	// Secret's).
	SquidConfPath = "/etc/squid/squid.conf"
	// BusyboxPath is Debian's busybox-static.
	BusyboxPath = "/bin/busybox"
)

// squidConf is the image's own configuration, for a pod without
// credentials: a forward proxy on 3128 for clients of the cluster's private
// ranges to the public internet only (proxyauth's default Egress, as the
// operator's own configuration has), no cache, logs to the container's
// streams, and every file Squid writes under the directories the pod
// mounts writable.
func squidConf() string {
	return `http_port 3128
acl localnet src 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7 fe80::/10
` + proxyauth.Egress{}.SquidRules() + `http_access allow localnet
http_access deny all
cache deny all
access_log stdio:/dev/stdout
cache_log stdio:/dev/stderr
cache_store_log none
pid_filename /run/squid.pid
coredump_dir /var/spool/squid
pinger_enable off
`
}

// hostImage describes an image built from this machine's files.
type hostImage struct {
	title      string
	user       string
	entrypoint []string
	cmd        []string
	// files are written as given; collect adds this machine's.
	files   []entry
	collect func(r *rootfs) error
	// packages are Debian's, whose versions go into the labels.
	packages []string
}

func squidImage() hostImage {
	uid := fmt.Sprint(SquidUID)
	writable := []entry{}
	for _, d := range []string{"var/log/squid/", "var/spool/squid/", "var/cache/squid/", "run/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		writable = append(writable, entry{name: d, mode: mode, uid: SquidUID, gid: SquidUID, dir: true})
	}
	return hostImage{
		title:      "proxy-operator-squid",
		user:       uid + ":" + uid,
		entrypoint: []string{"/usr/sbin/squid", "-NYC", "-f", SquidConfPath},
		files: append([]entry{
			{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nproxy:x:13:13:proxy:/bin:/usr/sbin/nologin\n")},
			{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nproxy:x:13:\n")},
			{name: strings.TrimPrefix(SquidConfPath, "/"), mode: 0o644, data: []byte(squidConf())},
		}, writable...),
		collect: func(r *rootfs) error {
			for _, exe := range []string{"/usr/sbin/squid", "/usr/lib/squid/unlinkd", "/usr/lib/squid/log_file_daemon"} {
				if err := r.addExecutable(exe); err != nil {
					return err
				}
			}
			for _, p := range []string{"/usr/share/squid", "/usr/share/squid-langpack", "/etc/squid/errorpage.css"} {
				if err := r.addFile(p); err != nil {
					return err
				}
			}
			return nil
		},
		packages: []string{"squid", "squid-common", "squid-langpack"},
	}
}

// toolboxImage holds what tests run in pods: busybox (sh, httpd, nc, …)
// and curl, as a non-root user.
func toolboxImage() hostImage {
	return hostImage{
		title: "proxy-operator-toolbox",
		user:  NonRootUser + ":" + NonRootUser,
		cmd:   []string{"sh"},
		files: []entry{
			{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh\n")},
			{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
			{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532, dir: true},
			{name: "tmp/", mode: 0o1777, dir: true},
		},
		collect: func(r *rootfs) error {
			if err := r.addExecutable("/usr/bin/curl"); err != nil {
				return err
			}
			if err := r.addFile(BusyboxPath); err != nil {
				return err
			}
			applets, err := exec.Command(BusyboxPath, "--list").Output()
			if err != nil {
				return fmt.Errorf("busybox --list: %w", err)
			}
			for _, a := range strings.Fields(string(applets)) {
				name := "usr/bin/" + a
				if _, taken := r.files[name]; !taken {
					r.add(entry{name: name, mode: 0o777, link: "busybox"})
				}
			}
			return nil
		},
		packages: []string{"busybox-static", "curl"},
	}
}

// binaryImage runs one static binary, as entrypoint at /<name>.
func binaryImage(binary, user string) hostImage {
	name := path.Base(binary)
	return hostImage{
		title:      name,
		user:       user,
		entrypoint: []string{"/" + name},
		files:      []entry{{name: "tmp/", mode: 0o1777, dir: true}},
		collect: func(r *rootfs) error {
			data, err := os.ReadFile(binary)
			if err != nil {
				return err
			}
			if libs, err := sharedLibraries(binary); err != nil || len(libs) > 0 {
				return fmt.Errorf("%s is not a static binary (%v, %v)", binary, libs, err)
			}
			r.add(entry{name: name, mode: 0o755, data: data})
			return nil
		},
	}
}

// buildHostImage assembles h for this machine's architecture, every
// timestamp at epoch, in one layer.
func buildHostImage(h hostImage, hostRoot string, epoch time.Time, version, revision string) (v1.Image, error) {
	r := newRootfs(hostRoot)
	if h.collect != nil {
		if err := h.collect(r); err != nil {
			return nil, fmt.Errorf("%s: %w", h.title, err)
		}
	}
	for _, e := range h.files {
		r.add(e)
	}
	layer, err := layerOf(r.entries(), epoch)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: epoch}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: created, CreatedBy: "hack/image: " + h.title}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", runtime.GOARCH, created
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User = h.entrypoint, h.cmd, h.user
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin"}
	cf.Config.Labels = ociLabels(h.title, version, revision, epoch)
	for _, p := range h.packages {
		if v := debianVersion(p); v != "" {
			cf.Config.Labels["org.debian.package."+p] = v
		}
	}
	return mutate.ConfigFile(img, cf)
}

// debianVersion is the installed version of package p, "" when not
// installed (or not Debian).
func debianVersion(p string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", p).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// hostImageNames are the -image values besides "operator".
func hostImageNames() []string { return []string{"binary", "squid", "toolbox"} }
