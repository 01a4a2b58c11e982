#!/usr/bin/env bash
# `go test -exec` for test/...: the go command compiles and links the test
# binaries in parallel (-p), and this lets at most $TEST_RUN_SLOTS (1) of
# them run at a time, since each starts its own control plane. A binary
# runs while it holds a slot, a lock file under $TEST_RUN_LOCKS, taken by
# flock -o: held by flock itself, so that nothing the test leaves behind can
# keep it.
set -uo pipefail

slots=${TEST_RUN_SLOTS:-1}
locks=${TEST_RUN_LOCKS:?set TEST_RUN_LOCKS to a directory for the slots}
mkdir -p "$locks"
if ((slots <= 1)); then
	exec flock -o "$locks/slot0" "$@"
fi
busy=234 # flock's exit code when a slot is taken; no test binary exits so
while :; do
	for ((i = 0; i < slots; i++)); do
		flock -n -o -E "$busy" "$locks/slot$i" "$@"
		rc=$?
		if ((rc != busy)); then
			exit "$rc"
		fi
	done
	sleep 1
done
