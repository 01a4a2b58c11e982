#!/usr/bin/env bash
# Installs Debian's python3-scrapy if Debian's python3 lacks Scrapy. The
# Python client's e2e tests (test/e2e/python) run a real Scrapy spider through
# the middleware in clients/python.
set -euo pipefail

py=/usr/bin/python3
if [[ -x $py ]] && "$py" -c 'import scrapy' >/dev/null 2>&1; then
	echo "python3-scrapy is installed"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "python3-scrapy is missing and this is not a Debian/Ubuntu machine: install Scrapy for /usr/bin/python3 by hand" >&2
	exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
	sudo=(sudo)
fi
echo "installing python3-scrapy"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-scrapy python3-pip python3-setuptools
