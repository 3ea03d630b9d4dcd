#!/usr/bin/env bash
# The test-only Python environment (called by `make deps`): a venv of Debian's python3 with the
# pinned PyPI packages of requirements.txt / constraints.txt (torch 2.x, HTA, torch-tb-profiler,
# py-spy, pystack). It lives in a cache directory, outside the checkout, so a fresh clone on the
# same machine reuses it; it is rebuilt only when the pins change. Never part of the product.
#
#   tests/venv/setup.sh            make or check the venv; prints its path
#   tests/venv/setup.sh --path     print where it is (made or not)
#   tests/venv/setup.sh --relock   resolve requirements.txt again and rewrite constraints.txt
#
# Where PyPI cannot be reached the venv is not made: one line says so, the reason is written to
# $VENV.unreachable and the tests that need it skip with that reason. Any other failure fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
venv=${TPTRACE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tptrace/venv}
req=$here/requirements.txt
cons=$here/constraints.txt

if [ "${1:-}" = "--path" ]; then echo "$venv"; exit 0; fi

reachable() {
	# a small pinned wheel fetched without the cache: a "no" from the registry or no route
	timeout 60 "$py" -m pip download -q --no-cache-dir --no-deps -d "$(mktemp -d)" six==1.17.0 >/dev/null 2>&1
}

if [ "${1:-}" = "--relock" ]; then
	rep=$(mktemp)
	"$py" -m pip install -q --dry-run --ignore-installed --only-binary=:all: --target "$(mktemp -d)" \
		--report "$rep" -r "$req" || exit 1
	{ sed -n '1,2p' "$cons"
	  "$py" -c 'import json,sys
for n, v in sorted((i["metadata"]["name"].lower(), i["metadata"]["version"]) for i in json.load(open(sys.argv[1]))["install"]):
    print(f"{n}=={v}")' "$rep"; } > "$cons.tmp" && mv "$cons.tmp" "$cons"
	rm -f "$rep"; echo "constraints.txt: $(grep -vc '^#' "$cons") packages"; exit 0
fi

stamp=$(cat "$req" "$cons" <("$py" -V) | sha256sum | cut -c1-16)
if [ -f "$venv/.tptrace-stamp" ] && [ "$(cat "$venv/.tptrace-stamp")" = "$stamp" ] &&
   "$venv/bin/python" -c 'import torch, hta, torch_tb_profiler' 2>/dev/null &&
   [ -x "$venv/bin/tlparse" ]; then
	echo "test venv: $venv (up to date)"; exit 0
fi

mkdir -p "$(dirname "$venv")" || exit 1
# made in place; the stamp, written last, says it is whole (a cut install has none and is redone)
rm -rf "$venv" "$venv.unreachable"
echo "test venv: installing the pinned PyPI packages into $venv (torch $(sed -n 's/^torch==//p' "$req"); a few minutes)"
if ! "$py" -m venv "$venv"; then
	echo "tptrace: test venv: $py -m venv failed (Debian package python3-venv)" >&2; exit 1
fi
log=$(mktemp)
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
	-r "$req" -c "$cons" >"$log" 2>&1; then
	if ! reachable; then
		why="PyPI could not be reached when make deps ran ($(date -u +%FT%TZ))"
		echo "$why" > "$venv.unreachable"
		echo "tptrace: test venv not made: $why; the tests that need it skip"
		rm -rf "$venv" "$log"; exit 0
	fi
	tail -n 20 "$log" >&2
	echo "tptrace: test venv: pip install failed (above)" >&2
	rm -rf "$venv" "$log"; exit 1
fi
rm -f "$log"
echo "$stamp" > "$venv/.tptrace-stamp" || exit 1
echo "test venv: $venv"
