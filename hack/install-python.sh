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
"$(dirname "$0")/apt-install.sh" python3-scrapy python3-pip python3-setuptools
