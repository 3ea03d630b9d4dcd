#!/usr/bin/env bash
# The suite under load (issue 24 item 5): one busy loop per online CPU (nice 0, like any other
# job on a shared host), then tests/run.py with the given arguments, the loops ended on every
# way out. A test that passes alone and fails here depends on timing.
#
#   tests/busy.sh [--repeat N] [tests/run.py ARGS...]     e.g. tests/busy.sh --repeat 3 -k test_pyrun
#   make test-loaded RUN_ARGS="-k test_fr_hang"
#
# Prints "busy: N loops on N CPUs", each run's lines, and "busy: R/N runs passed"; exits 0
# only when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

repeat=1
if [[ ${1:-} == --repeat ]]; then
	if [[ ! ${2:-} =~ ^[1-9][0-9]*$ ]]; then
		echo "busy: --repeat wants a positive count, got '${2:-}'" >&2
		exit 2
	fi
	repeat=$2
	shift 2
fi

ncpu=$(getconf _NPROCESSORS_ONLN)
pids=()
stop_loops() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null
	done
	pids=()
}
trap stop_loops EXIT
trap 'exit 130' INT TERM

for ((i = 0; i < ncpu; i++)); do
	# a shell loop costs nothing to start and never sleeps
	nice -n 0 bash -c 'while :; do :; done' &
	pids+=("$!")
done
echo "busy: ${#pids[@]} loops on $ncpu CPUs"

passed=0
for ((run = 1; run <= repeat; run++)); do
	echo "busy: run $run of $repeat"
	python3 tests/run.py "$@" 2>&1
	rc=$?
	[[ $rc -eq 0 ]] && passed=$((passed + 1))
done
echo "busy: $passed/$repeat runs passed"
[[ $passed -eq $repeat ]]
