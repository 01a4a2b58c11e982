#!/usr/bin/env bash
# Installs what the Squid and toolbox images are made of, if missing:
# Debian's squid (hack/install-squid.sh), busybox-static and curl.
set -euo pipefail

here=$(dirname "$0")
"$here/install-squid.sh"
missing=()
# busybox-static, not busybox: the toolbox copies one static binary.
dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' || missing+=(busybox-static)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if ((${#missing[@]} == 0)); then
	echo "busybox-static and curl are installed"
	exit 0
fi
"$here/apt-install.sh" "${missing[@]}"
