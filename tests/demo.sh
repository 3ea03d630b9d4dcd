#!/usr/bin/env bash
# make demo's run step: tests/demo.py (the product end to end on the simulated stack).
exec python3 "$(dirname "$0")/demo.py" "$@"
