#!/usr/bin/env bash
# apt-get installs the packages named as arguments (through sudo when not
# root). The install-*.sh scripts call it after checking what is missing.
set -euo pipefail

if ! command -v apt-get >/dev/null 2>&1; then
	echo "$* missing and this is not a Debian/Ubuntu machine: install them by hand" >&2
	exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi
echo "installing $*"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
