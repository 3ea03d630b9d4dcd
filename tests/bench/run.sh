#!/usr/bin/env bash
# make bench: build everything the benchmarks measure (tests/bench/bench.mk), then run the
# suite (tests/bench/run.py). Prints one "key: value" line per figure on stdout. Needs root
# (BPF). Not part of make test.
set -euo pipefail
cd "$(dirname "$0")/../.."
make --no-print-directory -f tests/bench/bench.mk bench-bins
exec python3 tests/bench/run.py "$@"
