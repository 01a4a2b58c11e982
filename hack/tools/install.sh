#!/usr/bin/env bash
# Builds pinned tools into bin/ from Go modules: with no argument the
# control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl, pinned in this module) and helm (hack/tools/helm, a module of its own: the chart's tests
# run it); with "lint" the linters (staticcheck, pinned in hack/tools/lint,
# a module of its own); with "cluster" the node's parts for `make cluster`
# (kubelet, kube-scheduler and kube-proxy from this module, CoreDNS and
# kube-network-policies from modules of their own). A binary whose stamps
# name the pinned version and its module's go.mod is kept, so only the first run pays the ~10
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

# The name `go build -o DIR/` gives a command: its import path's last
# element, or the one before a major version suffix (server/v3 -> server).
binname() {
	local path=$1 last=${1##*/}
	if [[ $last =~ ^v[0-9]+$ ]]; then path=${path%/*}; last=${path##*/}; fi
	echo "$last"
}

# build VERSION LDFLAGS MODULE-DIR NAME=IMPORT-PATH...: the named commands
# that are neither in bin/ at VERSION nor in the cache are linked by one `go
# build`, which compiles their shared packages once and links them in
# parallel.
build() {
	local version=$1 ldflags=$2 dir=$3
	shift 3
	# The module's go.mod is part of the key: the same tool version built
	# against other dependency versions is another binary.
	# So are its own Go files, where it has any (CoreDNS's main.go picks
	# the plugins).
	local key files=("$dir/go.mod")
	if compgen -G "$dir/*.go" >/dev/null; then files+=("$dir"/*.go); fi
	key="$version-$(cat "${files[@]}" | sha256sum | cut -c1-12)"
	local todo=() names=() spec name path kept
	for spec in "$@"; do
		name=${spec%%=*} path=${spec#*=}
		kept="$cache/$name-$key-$platform"
		if [[ -x "$bin/$name" && "$(cat "$bin/.$name.version" 2>/dev/null)" == "$version" &&
			"$(cat "$bin/.$name.key" 2>/dev/null)" == "$key" ]]; then
			echo "bin/$name $version is up to date"
		elif [[ -x $kept ]]; then
			echo "bin/$name $version from $kept"
			cp "$kept" "$bin/$name.tmp" && mv "$bin/$name.tmp" "$bin/$name"
			echo "$version" >"$bin/.$name.version"
			echo "$key" >"$bin/.$name.key"
		else
			todo+=("$path")
			names+=("$name")
		fi
	done
	((${#todo[@]})) || return 0
	echo "building ${names[*]} $version (slow the first time)"
	local out
	out=$(mktemp -d "$bin/.build.XXXXXX")
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/" "${todo[@]}")
	local i
	for i in "${!names[@]}"; do
		name=${names[$i]}
		mv "$out/$(binname "${todo[$i]}")" "$bin/$name"
		echo "$version" >"$bin/.$name.version"
		echo "$key" >"$bin/.$name.key"
		# Copied, then renamed: another clone may read the cache meanwhile.
		kept="$cache/$name-$key-$platform"
		if mkdir -p "$cache" 2>/dev/null && cp "$bin/$name" "$kept.tmp$$" 2>/dev/null; then
			mv "$kept.tmp$$" "$kept"
		fi
	done
	rm -rf "$out"
}

# Each module's builds run beside the others': a link uses one core, and
# the modules share few packages (hack/tools requires the product's
# versions of the modules both use, so its packages mostly come from the
# build cache after `go vet`).
pids=()
started() { pids+=("$!"); }
finish() {
	local failed=0 pid
	for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
	exit "$failed"
}

if [[ ${1:-} == lint ]]; then
	staticcheck_version=$(cd "$here/lint" && go list -m -f '{{.Version}}' honnef.co/go/tools)
	build "$staticcheck_version" "" "$here/lint" staticcheck=honnef.co/go/tools/cmd/staticcheck
	exit 0
fi

# nft_queue_works: whether this machine's nftables can queue packets to
# user space (the rule hack/cluster/node.go's nftQueueWorks tries in the
# node); prints why not.
nft_queue_works() {
	local table=proxy-operator-tools-probe out
	if ! command -v nft >/dev/null 2>&1; then
		echo "no nft command (apt-get install nftables)"
		return 1
	fi
	if ! out=$(printf '%s\n' "add table inet $table" \
		"add chain inet $table c { type filter hook forward priority 0; }" \
		"add rule inet $table c queue num 100 bypass" | nft -f - 2>&1); then
		nft delete table inet "$table" >/dev/null 2>&1 || true
		echo "this kernel's nftables has no queue to user space (nft_queue): ${out%%$'\n'*}"
		return 1
	fi
	nft delete table inet "$table" >/dev/null 2>&1 || true
}

k8s=k8s.io/kubernetes/cmd
if [[ ${1:-} == cluster ]]; then
	build "$k8s_version" "$k8s_ldflags" "$here" kube-scheduler=$k8s/kube-scheduler kube-proxy=$k8s/kube-proxy kubelet=$k8s/kubelet &
	started
	coredns_version=$(cd "$here/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
	CGO_ENABLED=0 build "$coredns_version" "-s -w" "$here/coredns" coredns=github.com/proxy-operator/proxy-operator/hack/tools/coredns &
	started
	# kube-network-policies only where it can run: it decides on each new
	# connection in user space, through nft's queue expression, which some
	# kernels lack (this project's CI VM's). `make cluster` probes the same
	# rule in the node and runs without an agent, saying why, otherwise.
	# Not built, it costs nothing: its Kubernetes v0.32 libraries are a
	# dependency graph of their own (minutes on a cold 2-core machine).
	if reason=$(nft_queue_works); then
		netpol_version=$(cd "$here/netpol" && go list -m -f '{{.Version}}' sigs.k8s.io/kube-network-policies)
		CGO_ENABLED=0 build "$netpol_version" "-s -w" "$here/netpol" kube-network-policies=sigs.k8s.io/kube-network-policies/cmd &
		started
	else
		echo "not building kube-network-policies: $reason"
		rm -f "$bin/kube-network-policies" "$bin/.kube-network-policies.version" "$bin/.kube-network-policies.key"
	fi
	finish
fi

build "$etcd_version" "-s -w" "$here" etcd=go.etcd.io/etcd/server/v3 &
started
build "$k8s_version" "$k8s_ldflags" "$here" kube-apiserver=$k8s/kube-apiserver kube-controller-manager=$k8s/kube-controller-manager kubectl=$k8s/kubectl &
started
helm_version=$(cd "$here/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
hv=helm.sh/helm/v4/internal/version
build "$helm_version" "-s -w -X $hv.version=$helm_version" "$here/helm" helm=helm.sh/helm/v4/cmd/helm &
started
finish
