// Command image is `make image`: it builds the operator's OCI image without
// a container runtime — a static binary per platform (-trimpath, no build ID,
// the version and revision stamped into pkg/version), CA certificates and a
// non-root user (65532) — assembled with go-containerregistry into an OCI
// image layout (an index over one image per platform) and, optionally, a
// tarball that `docker load` and `ctr import` read. The same source, version
// and epoch give the same digests: every timestamp is the epoch (the commit
// time under make) and files are written in a fixed order.
//
//	go run ./hack/image -out bin/image -version v0.4.0 -epoch 1700000000
//
// With -image it builds, for this machine's architecture and from its own
// files, one of the images besides the operator's, as a tarball named by
// -ref: "squid" (Debian's squid package and the libraries it loads, the
// user proxy (13), a configuration of its own that the operator's pods
// replace with their Secret's), "toolbox" (busybox-static and curl, for the
// tests' pods) and "binary" (one static binary: the pause, CoreDNS and
// NetworkPolicy agent images of make cluster). The same packages and epoch
// give the same digest; the Debian versions are labels.
//
// It builds the binary with the go command. Of the module it imports
// pkg/proxyauth alone (the Squid image's access rules), and its tests
// test/controlplane and test/framework; nothing may import it.
package main
