#!/usr/bin/env bash
# Builds pinned tools into bin/ from Go modules: with no argument the
# control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl, pinned in this module) and helm (hack/tools/helm, a module of its own: the chart's tests
# run it); with "lint" the linters (staticcheck, pinned in hack/tools/lint,
# a module of its own); with "cluster" the node's parts for `make cluster`
# (kubelet, kube-scheduler and kube-proxy from this module, CoreDNS and
# kube-network-policies from modules of their own). A binary whose stamp
# names the pinned version is kept, so only the first run pays the ~10
# minute cold build; a fresh clone copies what an earlier one built.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="${BIN_DIR:-$root/bin}"
mkdir -p "$bin"

k8s_version=v1.37.2
etcd_version=v3.7.0
pkg=k8s.io/component-base/version
k8s_ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"

# Built binaries are also kept per user, by name, version and platform (as
# setup-envtest keeps its binaries), so that a fresh clone, CI's, copies
# them instead of linking them again (about 3 minutes on 2 cores).
cache="${PROXY_OPERATOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-operator/tools}"
platform="$(go env GOOS)-$(go env GOARCH)-cgo$(go env CGO_ENABLED)"

build() { # name version import-path ldflags [module-dir]
	local name=$1 version=$2 path=$3 ldflags=$4 dir=${5:-$here}
	local stamp="$bin/.$name.version"
	local kept="$cache/$name-$version-$platform"
	if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "bin/$name $version is up to date"
		return
	fi
	if [[ -x $kept ]]; then
		echo "bin/$name $version from $kept"
		cp "$kept" "$bin/$name.tmp" && mv "$bin/$name.tmp" "$bin/$name"
		echo "$version" >"$stamp"
		return
	fi
	echo "building bin/$name $version (slow the first time)"
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$bin/$name" "$path")
	echo "$version" >"$stamp"
	# Copied, then renamed: another clone may read the cache meanwhile.
	if mkdir -p "$cache" 2>/dev/null && cp "$bin/$name" "$kept.tmp$$" 2>/dev/null; then
		mv "$kept.tmp$$" "$kept"
	fi
}

if [[ ${1:-} == lint ]]; then
	staticcheck_version=$(cd "$here/lint" && go list -m -f '{{.Version}}' honnef.co/go/tools)
	build staticcheck "$staticcheck_version" honnef.co/go/tools/cmd/staticcheck "" "$here/lint"
	exit 0
fi

if [[ ${1:-} == cluster ]]; then
	build kube-scheduler "$k8s_version" k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
	build kube-proxy "$k8s_version" k8s.io/kubernetes/cmd/kube-proxy "$k8s_ldflags"
	build kubelet "$k8s_version" k8s.io/kubernetes/cmd/kubelet "$k8s_ldflags"
	coredns_version=$(cd "$here/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
	CGO_ENABLED=0 build coredns "$coredns_version" github.com/coredns/coredns "-s -w" "$here/coredns"
	netpol_version=$(cd "$here/netpol" && go list -m -f '{{.Version}}' sigs.k8s.io/kube-network-policies)
	CGO_ENABLED=0 build kube-network-policies "$netpol_version" sigs.k8s.io/kube-network-policies/cmd "-s -w" "$here/netpol"
	exit 0
fi

build etcd "$etcd_version" go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver "$k8s_version" k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build kube-controller-manager "$k8s_version" k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
build kubectl "$k8s_version" k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
helm_version=$(cd "$here/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
hv=helm.sh/helm/v4/internal/version
build helm "$helm_version" helm.sh/helm/v4/cmd/helm "-s -w -X $hv.version=$helm_version" "$here/helm"
