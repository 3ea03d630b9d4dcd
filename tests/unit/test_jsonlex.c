// SPDX-License-Identifier: MIT
/* jsonlex (user/base/jsonlex.h), the lexer tptrace-fr and tptrace report read with: string
 * escapes, numbers (fast paths, saturation, fractions), nesting, truncated input, and bad
 * input, which must end in exactly one error line naming the byte. */
#include <stdlib.h>

#include "check.h"
#include "jsonlex.h"

struct lx {
	struct jlex j;
	char err[128];
};

static struct jlex *lx_init(struct lx *l, const char *s)
{
	memset(l->err, 0, sizeof(l->err));
	jl_init(&l->j, s, strlen(s), l->err, sizeof(l->err));
	return &l->j;
}

/* one error, exactly this line, and nothing after it */
static void check_err(const struct lx *l, const char *in, const char *want)
{
	CHECK(l->j.failed, "%s: failed", in);
	CHECK(strcmp(l->err, want) == 0, "%s: error \"%s\", want \"%s\"", in, l->err, want);
	CHECK(!strchr(l->err, '\n'), "%s: one line: \"%s\"", in, l->err);
}

static void check_str(const char *in, size_t cap, int want_len, const char *want)
{
	struct lx l;
	struct jlex *j = lx_init(&l, in);
	char out[64] = "untouched";
	int n = jl_str(j, out, cap);

	CHECK(n == want_len, "jl_str(%s, cap %zu) == %d, want %d", in, cap, n, want_len);
	CHECK(memcmp(out, want, (size_t)want_len + 1) == 0, "jl_str(%s) read \"%s\", want \"%s\"",
	      in, out, want);
	CHECK(!j->failed && j->p == j->end, "jl_str(%s) consumed all, no error (%s)", in, l.err);
}

static void test_strings(void)
{
	struct lx l;
	struct jlex *j;
	char out[16];

	check_str("\"plain\"", 64, 5, "plain");
	check_str("  \"ws before\"", 64, 9, "ws before");
	check_str("\"a\\nb\\tc\\rd\\be\\ff\\\"g\\\\h\\/i\"", 64, 17, "a\nb\tc\rd\be\ff\"g\\h/i");
	/* \u: ASCII decoded, the rest (and NUL) one '?' */
	check_str("\"\\u0041\\u007a\\u00e9\\u0000\\u20AC\"", 64, 5, "Az???");
	/* truncated to cap - 1, NUL-terminated, on both the fast and the escape path */
	check_str("\"0123456789\"", 5, 4, "0123");
	check_str("\"0123456789\\n\"", 5, 4, "0123");
	check_str("\"\"", 64, 0, "");

	/* skipped (out NULL): escaped quotes and backslash runs do not end it early */
	j = lx_init(&l, "\"a\\\"b\\\\\" , 1");
	CHECK(jl_str(j, NULL, 0) == 0 && !j->failed, "skip with escapes (%s)", l.err);
	CHECK(*j->p == ' ' && j->p == j->end - 4, "skip ends after the closing quote");

	j = lx_init(&l, "\"bad \\x escape\"");
	CHECK(jl_str(j, out, sizeof(out)) < 0, "\\x is refused");
	check_err(&l, "\\x", "bad escape at byte 6");
	j = lx_init(&l, "\"\\u12G4\"");
	CHECK(jl_str(j, out, sizeof(out)) < 0, "\\u12G4 is refused");
	check_err(&l, "\\u12G4", "bad \\u escape at byte 3");
	j = lx_init(&l, "123");
	CHECK(jl_str(j, out, sizeof(out)) < 0, "a number is not a string");
	check_err(&l, "123 as a string", "expected a string at byte 0");
}

static void check_int(const char *in, int64_t want)
{
	struct lx l;
	struct jlex *j = lx_init(&l, in);
	int64_t v = 12345;

	CHECK(jl_int(j, &v) && !j->failed, "jl_int(%s) ok (%s)", in, l.err);
	CHECK(v == want, "jl_int(%s) == %" PRId64 ", want %" PRId64, in, v, want);
	CHECK(j->p == j->end, "jl_int(%s) consumed it all", in);
}

static void check_bad_int(const char *in, const char *want)
{
	struct lx l;
	struct jlex *j = lx_init(&l, in);
	int64_t v;

	CHECK(!jl_int(j, &v), "jl_int(%s) fails", in);
	check_err(&l, in, want);
}

static void test_numbers(void)
{
	struct lx l;
	struct jlex *j;
	const char *s = NULL;
	size_t n = 0;

	check_int("0", 0);
	check_int("7", 7);
	check_int("-42", -42);
	check_int("12345678", 12345678);			/* one 8-digit word */
	check_int("1234567890123456", 1234567890123456LL);	/* two words */
	check_int("1764500000123456789", 1764500000123456789LL);	/* nanoseconds: 19 */
	check_int("9223372036854775807", INT64_MAX);
	check_int("9223372036854775808", INT64_MAX);		/* saturated, not wrapped */
	check_int("123456789012345678901234", INT64_MAX);
	check_int("-9223372036854775809", INT64_MIN + 1);	/* never JL_UNK */
	check_int("1.9", 1);
	check_int("-1.9", -1);
	check_int("2.5e3", 2500);
	check_int("1e30", INT64_MAX);
	check_int("null", JL_UNK);
	check_int("true", 1);
	check_int("false", 0);
	/* another type is unknown, not 0 and not an error */
	check_int("\"12\"", JL_UNK);
	check_int("[1, 2]", JL_UNK);
	check_int("{\"a\": 1}", JL_UNK);
	check_bad_int("-", "unexpected end of input at byte 1");
	check_bad_int("-x", "bad number at byte 1");
	check_bad_int("nul", "unexpected end of input at byte 3");
	check_bad_int("nulx", "bad literal at byte 0");
	check_bad_int("", "unexpected end of input at byte 0");

	/* the token as it stands, for readers that convert it themselves */
	j = lx_init(&l, " -1.5e+3,");
	CHECK(jl_number(j, &s, &n) && n == 7 && !memcmp(s, "-1.5e+3", 7),
	      "jl_number span \"%.*s\"", (int)n, s ? s : "");
	CHECK(*j->p == ',', "jl_number stops at the delimiter");
	j = lx_init(&l, "+1");
	CHECK(!jl_number(j, &s, &n), "+1 is not JSON");
	check_err(&l, "+1", "bad number at byte 0");
	j = lx_init(&l, ".5");
	CHECK(!jl_number(j, &s, &n), ".5 is not JSON");
	check_err(&l, ".5", "bad number at byte 0");
}

/* {"a":[1,{"b":"x"}],"c":null} walked with next_key / next_elem */
static void test_walk(void)
{
	struct lx l;
	struct jlex *j = lx_init(&l, " { \"a\" : [ 1 , {\"b\":\"x\"} ] , \"c\":null }");
	char key[8], val[8];
	int klen, nkeys = 0, nelems = 0;
	int64_t v;

	for (bool first = true; jl_next_key(j, &first, key, sizeof(key), &klen);) {
		nkeys++;
		if (klen == 1 && key[0] == 'a') {
			for (bool f2 = true; jl_next_elem(j, &f2);) {
				nelems++;
				if (nelems == 1) {
					CHECK(jl_int(j, &v) && v == 1, "a[0] == 1");
				} else {
					bool f3 = true;

					CHECK(jl_next_key(j, &f3, key, sizeof(key), &klen) &&
					      klen == 1 && key[0] == 'b', "a[1] has b");
					CHECK(jl_str_field(j, val, sizeof(val)) && !strcmp(val, "x"),
					      "a[1].b == \"x\"");
					CHECK(!jl_next_key(j, &f3, key, sizeof(key), &klen) &&
					      !j->failed, "a[1] ends");
				}
			}
		} else {
			CHECK(klen == 1 && key[0] == 'c', "second key c");
			CHECK(jl_is_null(j), "c is null");
			CHECK(jl_skip(j, 0), "null skipped");
		}
	}
	CHECK(!j->failed, "walk: no error (%s)", l.err);
	CHECK(nkeys == 2 && nelems == 2, "walk saw %d keys, %d elements", nkeys, nelems);
	jl_ws(j);
	CHECK(j->p == j->end, "walk consumed it all");

	/* keys longer than the buffer are cut, not overrun */
	j = lx_init(&l, "{\"a_very_long_key\":1}");
	{
		bool first = true;

		CHECK(jl_next_key(j, &first, key, 4, &klen) && klen == 3 &&
		      !memcmp(key, "a_v", 3), "long key cut to 3 (klen %d)", klen);
	}
}

static void check_bad_walk(const char *in, const char *want)
{
	struct lx l;
	struct jlex *j = lx_init(&l, in);

	CHECK(!jl_skip(j, 0), "skip(%s) fails", in);
	check_err(&l, in, want);
}

static void test_nesting_and_errors(void)
{
	char deep[200];
	struct lx l;
	struct jlex *j;
	int n;

	/* 64 levels pass, 66 do not */
	for (n = 0; n < 64; n++)
		deep[n] = '[';
	for (int i = 0; i < 64; i++)
		deep[n++] = ']';
	deep[n] = 0;
	j = lx_init(&l, deep);
	CHECK(jl_skip(j, 0) && j->p == j->end, "64 levels skipped (%s)", l.err);
	for (n = 0; n < 66; n++)
		deep[n] = '[';
	for (int i = 0; i < 66; i++)
		deep[n++] = ']';
	deep[n] = 0;
	check_bad_walk(deep, "nesting too deep at byte 65");

	check_bad_walk("{\"a\" 1}", "expected ':' at byte 5");
	check_bad_walk("{\"a\":1 \"b\":2}", "expected ',' or '}' at byte 7");
	check_bad_walk("[1 2]", "expected ',' or ']' at byte 3");
	check_bad_walk("{\"a\":1,}", "expected a string at byte 7");
	check_bad_walk("[1,]", "bad number at byte 3");
	check_bad_walk("{1:2}", "expected a string at byte 1");
	/* truncated anywhere: one "unexpected end" at the end of the input */
	check_bad_walk("{\"a\":", "unexpected end of input at byte 5");
	check_bad_walk("{\"a\":[1,2", "unexpected end of input at byte 9");
	check_bad_walk("\"abc", "unexpected end of input at byte 4");
	check_bad_walk("\"ab\\", "unexpected end of input at byte 4");
	check_bad_walk("[tru", "unexpected end of input at byte 4");

	/* the first error stays; offsets count from the file (off0) */
	j = lx_init(&l, "xyz");
	j->off0 = 1000;
	j->p++;
	jl_fail(j, "first");
	j->p++;
	jl_fail(j, "second");
	check_err(&l, "two failures", "first at byte 1001");
}

static void test_extent(void)
{
	const char *obj = "{\"a\":\"}\\\"]\",\"b\":[1,{}]} ,";

	CHECK(jl_extent(obj, strlen(obj), false) == (long)strlen(obj) - 2,
	      "object extent %ld", jl_extent(obj, strlen(obj), false));
	CHECK(jl_extent(obj, 10, false) == 0, "a value cut short is incomplete, not malformed");
	CHECK(jl_extent("\"a\\\"b\"x", 7, false) == 6, "string extent past an escaped quote");
	CHECK(jl_extent("123,", 4, false) == 3, "scalar ends at a delimiter");
	CHECK(jl_extent("123", 3, false) == 0, "scalar at the buffer's end: more may follow");
	CHECK(jl_extent("123", 3, true) == 3, "scalar at the end of input");
	CHECK(jl_extent("{]", 2, false) == -1, "mismatched close is malformed");
	CHECK(jl_extent("[1,[2]] ", 8, false) == 7, "nested arrays");
	CHECK(jl_extent("", 0, true) == 0, "nothing");
}

int main(void)
{
	test_strings();
	test_numbers();
	test_walk();
	test_nesting_and_errors();
	test_extent();
	return check_done();
}
