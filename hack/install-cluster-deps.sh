#!/usr/bin/env bash
# Installs the node's runtime for `make cluster` if missing: Debian's
# containerd, runc and CNI plugins (bridge, host-local, portmap in
# /usr/lib/cni). The package's own containerd service is stopped where an
# init system runs: make cluster runs its own, on its own paths.
set -euo pipefail

missing=()
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
if ((${#missing[@]} == 0)); then
	echo "containerd, runc and the CNI plugins are installed"
	exit 0
fi
"$(dirname "$0")/apt-install.sh" "${missing[@]}"
if [[ -d /run/systemd/system ]]; then
	sudo=()
	[[ $(id -u) -ne 0 ]] && sudo=(sudo)
	"${sudo[@]}" systemctl disable --now containerd || true
fi
