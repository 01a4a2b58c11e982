#!/usr/bin/env bash
# Installs Debian's prometheus package if promtool is missing: the alert
# rules' tests (artifacts/observability) run `promtool check rules` and
# `promtool test rules`. Only the tool is used; no Prometheus server is
# started.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
	echo "promtool is installed"
	exit 0
fi
"$(dirname "$0")/apt-install.sh" --no-install-recommends prometheus
