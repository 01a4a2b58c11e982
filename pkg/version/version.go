package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped by the linker: -X github.com/proxy-operator/proxy-operator/pkg/version.version=v0.4.0
// (and .revision=<commit>). They are variables only because -X can set
// nothing else; nothing assigns them at run time.
var (
	version  = ""
	revision = ""
)

// Info is one build's identity.
type Info struct {
	Version   string
	Revision  string
	GoVersion string
	Platform  string
}

// Get returns this build's identity. Without stamps the version is "dev" and
// the revision the VCS revision the toolchain embedded, if any.
func Get() Info {
	i := Info{Version: version, Revision: revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Revision == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					i.Revision = s.Value
				}
			}
		}
	}
	return i
}

// String is one line for --version and the start-up log.
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("proxy-operator %s (revision %s, %s, %s)", i.Version, rev, i.GoVersion, i.Platform)
}
