#!/usr/bin/env bash
# Installs Debian's squid if it is missing. The local node agent and the fake
# Compute Engine endpoint run one squid per proxy on 127.0.0.N:3128.
set -euo pipefail

if command -v squid >/dev/null 2>&1 || [[ -x /usr/sbin/squid ]]; then
	echo "squid is installed"
	exit 0
fi
"$(dirname "$0")/apt-install.sh" squid

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi
# The package starts a system squid on :3128 (all addresses) where an init
# system runs; it would take the port our per-proxy squids bind on loopback.
if [[ -d /run/systemd/system ]]; then
	"${sudo[@]}" systemctl disable --now squid || true
elif command -v service >/dev/null 2>&1; then
	"${sudo[@]}" service squid stop >/dev/null 2>&1 || true
fi
