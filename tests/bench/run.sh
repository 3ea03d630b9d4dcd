#!/usr/bin/env bash
# make bench: build the benchmark programs, then run the suite (tests/bench/run.py).
# Prints one "key: value" line per figure on stdout. Needs root (BPF). Not part of make test.
set -euo pipefail
cd "$(dirname "$0")/../.."
make --no-print-directory -f tests/bench/bench.mk bench-bins
# the flight-recorder analyzer and its dump generator, when the tree has them (else n/a)
make --no-print-directory tptrace-fr .output/tptrace-fr-gen >/dev/null 2>&1 || true
exec python3 tests/bench/run.py "$@"
