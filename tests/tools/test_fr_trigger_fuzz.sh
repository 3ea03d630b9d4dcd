#!/bin/sh
# The trigger-record fuzz target under libFuzzer (ASan/UBSan): the seed corpus once, then a
# short mutation run. Run from the repo root after `make test-bins`; skips, saying why, where
# clang lacks libFuzzer (the seeded loop unit/test_fr_trigger_fuzz runs regardless).
FUZZ=.output/unit/fr_trigger_fuzz
CORPUS=tests/unit/trigger_corpus
if [ ! -x "$FUZZ" ]; then
	echo "$FUZZ not built: clang has no libFuzzer (Debian: libclang-rt-N-dev)"
	exit 77
fi
fail=0
if out=$("$FUZZ" $CORPUS/* 2>&1); then
	echo "ok fr_trigger_fuzz_corpus"
else
	echo "FAIL fr_trigger_fuzz_corpus: $(echo "$out" | grep -m1 -E 'ERROR|runtime error|fr_trigger_fuzz:')"
	fail=1
fi
tmp=$(mktemp -d)
if out=$("$FUZZ" -runs=50000 -max_len=8192 -timeout=10 -rss_limit_mb=512 -artifact_prefix="$tmp/" \
	 "$tmp" $CORPUS 2>&1); then
	echo "ok fr_trigger_fuzz_smoke"
else
	echo "FAIL fr_trigger_fuzz_smoke: $(echo "$out" | grep -m1 -E 'ERROR|runtime error|fr_trigger_fuzz:') (inputs in $tmp)"
	fail=1
fi
[ $fail = 0 ] && rm -rf "$tmp"
exit $fail
