#!/bin/sh
# Smoke run of the dump-parser fuzz target over the saved corpus (regression inputs included).
# Run from the repo root after `make fr-fuzz`; skips, saying why, where clang lacks libFuzzer.
FUZZ=.output/fr_fuzz
CORPUS=tests/tools/corpus
# tests/run.py reports exit 77 as a skip, with the last stdout line as the reason
if [ ! -x "$FUZZ" ]; then
	rt=$(${CLANG:-clang} -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-$(uname -m).a
	if [ -f "$rt" ]; then
		echo "$FUZZ not built although $rt exists: run make test-bins"
	else
		echo "$FUZZ not built: clang has no libFuzzer ($rt missing; Debian: libclang-rt-N-dev)"
	fi
	exit 77
fi
fail=0
# PyTorch flight-recorder pickles (tools/fr/fr_pickle.c, written by test_fr_torch.py --corpus)
# are fuzzed through the same target: their seeds must be there
npk=0
for f in $CORPUS/*; do
	[ "$(head -c 1 "$f" | od -An -tx1 | tr -d ' ')" = 80 ] && npk=$((npk + 1))
done
if [ $npk -ge 10 ]; then
	echo "ok fr_fuzz_pickle_seeds ($npk)"
else
	echo "FAIL fr_fuzz_pickle_seeds: $npk pickle seeds in $CORPUS (run tests/tools/test_fr_torch.py --corpus)"
	fail=1
fi
# every saved input, once each: the regressions must stay fixed
if out=$("$FUZZ" $CORPUS/* 2>&1); then
	echo "ok fr_fuzz_corpus"
else
	echo "FAIL fr_fuzz_corpus: $(echo "$out" | grep -m1 -E 'ERROR|runtime error')"
	fail=1
fi
# a short mutation run; nothing is written to the saved corpus
tmp=$(mktemp -d)
if out=$("$FUZZ" -runs=2000 -max_len=65536 -timeout=10 -artifact_prefix="$tmp/" "$tmp" $CORPUS 2>&1); then
	echo "ok fr_fuzz_smoke"
else
	echo "FAIL fr_fuzz_smoke: $(echo "$out" | grep -m1 -E 'ERROR|runtime error') (inputs in $tmp)"
	fail=1
fi
[ $fail = 0 ] && rm -rf "$tmp"
exit $fail
