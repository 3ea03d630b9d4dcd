#!/bin/bash
# unit_traces_ab.sh BASE_OUTPUT NEW_OUTPUT: the traces the trace writer's unit tests write from
# their fixed records (test_decode, test_driver, test_decode_pystacks), by two builds (their
# .output directories, e.g. a checkout of the base commit built beside this one), compared
# byte for byte. The tests remove what they write: a preloaded shim keeps it. What differs
# between two runs of one build is replaced first: the test's pid (the records' pid, and
# pid + 100000 for a second thread) and its own function's address in a launch's "func"
# (the test binary's layout). Not part of the suite: an A/B check for refactors.
set -euo pipefail
base=$1 new=$2
work=$(mktemp -d /tmp/tptrace-ab.XXXXXX)
cat > "$work/keep.c" <<'C'
int unlink(const char *p) { (void)p; return 0; }
int remove(const char *p) { (void)p; return 0; }
int rmdir(const char *p) { (void)p; return 0; }
int unlinkat(int d, const char *p, int f) { (void)d; (void)p; (void)f; return 0; }
int system(const char *c) { (void)c; return 0; }
C
cc -shared -fPIC -O2 -o "$work/keep.so" "$work/keep.c"

collect() {	# collect OUTDIR BUILD_OUTPUT
	local out=$1 bin=$2
	mkdir -p "$out"
	for t in test_decode test_driver test_decode_pystacks; do
		local before after pid
		before=$(ls -d /tmp/tptrace-*test.* /tmp/tptrace-pystacks.* 2>/dev/null | sort || true)
		setarch -R env LD_PRELOAD="$work/keep.so" "$bin/unit/$t" > "$out/$t.log" 2>&1
		after=$(ls -d /tmp/tptrace-*test.* /tmp/tptrace-pystacks.* 2>/dev/null | sort || true)
		mkdir -p "$out/$t"
		for d in $(comm -13 <(echo "$before") <(echo "$after")); do
			cp -r "$d"/. "$out/$t/"
			rm -rf "$d"
		done
		rm -f "$out/$t"/tptrace-fr.*	# a recorder dump: times of its own
		pid=$(grep -ho '"thread_name","pid":[0-9]*' "$out/$t"/*.json | head -1 | grep -o '[0-9]*$')
		for f in "$out/$t"/*; do
			case "$f" in *.gz) zcat "$f" > "${f%.gz}.unzipped"; rm "$f"; f=${f%.gz}.unzipped;; esac
			sed -i -E "s/\b$pid\b/PID/g; s/\b$((pid + 100000))\b/PID+100000/g;
				   s/\"func\":\"0x5555[0-9a-f]+\"/\"func\":\"TEST_BINARY_ADDR\"/g" "$f"
		done
	done
}
collect "$work/base" "$base"
collect "$work/new" "$new"
n=0
for f in $(cd "$work/base" && find . -type f ! -name '*.log' | sort); do
	cmp "$work/base/$f" "$work/new/$f"
	echo "$f: $(wc -c < "$work/new/$f") bytes identical"
	n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "no traces collected" >&2; exit 1; }
echo "$n traces byte-identical"
rm -rf "$work"
