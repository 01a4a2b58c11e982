#!/usr/bin/env bash
# make test-realnode: brings up `make cluster` (bin/cluster, already built,
# with its images) in the background, runs test/e2e/realnode (its test
# binary, bin/realnode.test, also built: nothing compiles beside the tests
# that `make test` runs at the same time; REALNODE_FLAGS are the binary's
# flags, -test.run=TestX) against it
# once .cluster/ready appears, and tears the cluster down whatever the
# outcome. On a failure it prints the tail of every component's log first.
#
# The teardown is the harder one: the cluster is SIGKILLed (its shims and
# containers outlive it) and `bin/cluster -down` must remove everything, as
# the next `make cluster` would; the machine's sysctls must be as before.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
state="$root/.cluster"

sysctls=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
before=$(sysctl -n "${sysctls[@]}")

bin/cluster &
pid=$!
stop_cluster() {
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" || true
}
trap stop_cluster EXIT

for ((i = 0; i < 600; i++)); do
	[[ -f $state/ready ]] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "make cluster exited before it was ready" >&2
		exit 1
	fi
	sleep 1
done
[[ -f $state/ready ]] || { echo "make cluster not ready after 600 s" >&2; exit 1; }

status=0
(cd test/e2e/realnode && PROXY_OPERATOR_CLUSTER="$state" exec "$root/bin/realnode.test" -test.paniconexit0 \
	-test.timeout "${REALNODE_TIMEOUT:-20m}" ${REALNODE_FLAGS:-}) || status=$?
if ((status != 0)); then
	for log in "$state"/logs/*.log "$state"/controlplane/*.log; do
		[[ -f $log ]] || continue
		echo "--- last lines of $log ---"
		tail -n 40 "$log"
	done
fi

# SIGKILL, then the teardown a next start runs.
trap - EXIT
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
if ! bin/cluster -down; then
	echo "bin/cluster -down did not remove everything after a SIGKILL" >&2
	status=1
fi
after=$(sysctl -n "${sysctls[@]}")
if [[ $before != "$after" ]]; then
	echo "sysctls ${sysctls[*]} were $(echo $before) before the cluster, $(echo $after) after it" >&2
	status=1
fi
if [[ -e $state ]] || ip netns list | grep -q '^po-cluster\b' || pgrep -f "$state" >/dev/null; then
	echo "left after the teardown: $(ls -d "$state" 2>/dev/null) $(ip netns list | grep po-cluster) $(pgrep -af "$state")" >&2
	status=1
fi
exit "$status"
