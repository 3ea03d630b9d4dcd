#!/usr/bin/env bash
# Does any torch 2.x wheel on the package index ship torch/utils/viz/MemoryViz.js (memory_viz's
# page script, which tests would drive in headless Chromium)? README Limits records the answer;
# this redoes the check. Not part of make test: it downloads one wheel per release (the
# smallest build, macOS arm64 for CPython 3.11, ~70 MB each, deleted after listing it).
#   tests/venv/memoryviz_wheels.sh     one line per release: VERSION WHEEL viz: FILES
set -uo pipefail
py=/usr/bin/python3
versions=$("$py" -m pip index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' | tr -d ',')
[ -n "$versions" ] || { echo "tptrace: memoryviz_wheels: the index lists no torch versions" >&2; exit 1; }
found=0
for v in $versions; do
	case $v in 2.*) ;; *) continue ;; esac
	d=$(mktemp -d)
	for plat in macosx_11_0_arm64 macosx_14_0_arm64; do
		"$py" -m pip download -q --no-deps --only-binary=:all: --platform $plat \
			--python-version 3.11 -d "$d" "torch==$v" >/dev/null 2>&1 && break
	done
	w=$(ls "$d"/*.whl 2>/dev/null | head -1)
	if [ -z "$w" ]; then
		echo "$v no wheel downloaded"
	else
		viz=$("$py" -c 'import sys, zipfile
print(" ".join(sorted(n for n in zipfile.ZipFile(sys.argv[1]).namelist()
                      if "/utils/viz/" in n and not n.endswith("/") and "__pycache__" not in n)))' "$w")
		echo "$v $(basename "$w") viz: $viz"
		case $viz in *MemoryViz.js*) found=1 ;; esac
	fi
	rm -rf "$d"
done
[ $found = 1 ] && echo "a wheel ships MemoryViz.js: README Limits is stale" || echo "no wheel ships MemoryViz.js"
