// SPDX-License-Identifier: MIT
/* demangle() and cuda_stub_kernel_name() on the names nvcc emits (see demangle.h). */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "demangle.h"

static void check_demangle(const char *in, const char *want)
{
	char *out = demangle(in);

	CHECK(out && strcmp(out, want) == 0, "demangle(\"%s\") == \"%s\", want \"%s\"", in,
	      out ? out : "(null)", want);
	CHECK(out != in, "demangle(\"%s\") returned its input, not a copy", in);
	free(out);
}

static void test_demangle(void)
{
	check_demangle("_Z9scale_vecPffi", "scale_vec(float*, float, int)");
	check_demangle("_ZN2ns2tkIiEEvPT_i", "void ns::tk<int>(int*, int)");
	check_demangle("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle",
		       "__device_stub__Z9scale_vecPffi(float*, float, int)::__handle");
	/* not mangled: unchanged, and bare type codes are not decoded as types */
	check_demangle("cudaLaunchKernel", "cudaLaunchKernel");
	check_demangle("f", "f");
	check_demangle("i", "i");
	check_demangle("", "");
	/* looks mangled, is not */
	check_demangle("_Zfoo", "_Zfoo");
	check_demangle("_Z", "_Z");
}

static void check_stub(const char *sym, const char *want_static, int want_ret, const char *want)
{
	char buf[128] = "untouched";
	int ret = cuda_stub_kernel_name(sym, want_static, buf, sizeof(buf));

	CHECK(ret == want_ret, "cuda_stub_kernel_name(\"%s\", %s) == %d, want %d", sym,
	      want_static ? want_static : "NULL", ret, want_ret);
	if (want)
		CHECK(ret == 0 && strcmp(buf, want) == 0, "\"%s\" -> \"%s\", want \"%s\"", sym, buf, want);
}

static void test_stub(void)
{
	char small[17];

	/* the examples of demangle.h */
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle", "__handle", 0,
		   "_Z9scale_vecPffi");
	check_stub("_ZZL32__device_stub__ZN2ns2tkIiEEvPT_iPiiE8__handle", "__handle", 0,
		   "_ZN2ns2tkIiEEvPT_i");
	check_stub("_Z30__device_stub__Z9scale_vecPffiPffi", NULL, 0, "_Z9scale_vecPffi");
	check_stub("_ZL32__device_stub__ZN2ns2tkIiEEvPT_iPii", NULL, 0, "_ZN2ns2tkIiEEvPT_i");

	/* the other statics nvcc puts in a stub, and discriminators */
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE3__f", "__f", 0, "_Z9scale_vecPffi");
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle_0", "__handle", 0,
		   "_Z9scale_vecPffi");
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle__12_", "__handle", 0,
		   "_Z9scale_vecPffi");
	/* stub parameters that themselves contain "E<digits>": ns::A, B */
	check_stub("_ZZ27__device_stub__Z1kN2ns1AE1BN2ns1AE1BE8__handle", "__handle", 0,
		   "_Z1kN2ns1AE1B");
	/* ... even the tail itself: k(ns::A, __handle) */
	check_stub("_ZZ34__device_stub__Z1kN2ns1AE8__handleN2ns1AE8__handleE8__handle", "__handle", 0,
		   "_Z1kN2ns1AE8__handle");

	/* wrong static, or a static where a function is wanted and vice versa */
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE3__f", "__handle", -EINVAL, NULL);
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE5__tmp", "__handle", -EINVAL, NULL);
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle", NULL, -EINVAL, NULL);
	check_stub("_Z30__device_stub__Z9scale_vecPffiPffi", "__handle", -EINVAL, NULL);
	/* guard variable of the static, not the static */
	check_stub("_ZGVZ30__device_stub__Z9scale_vecPffiPffiE5__tmp", "__tmp", -EINVAL, NULL);
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle_x", "__handle", -EINVAL, NULL);
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handlez", "__handle", -EINVAL, NULL);
	check_stub("_ZZ30__device_stub__Z9scale_vecPffiE8__handle", "__handle", -EINVAL, NULL);

	/* not stubs */
	check_stub("_Z9scale_vecPffi", NULL, -EINVAL, NULL);
	check_stub("cudaLaunchKernel", NULL, -EINVAL, NULL);
	check_stub("_Z30__device_stub__Z9scale_vecPffi", NULL, -EINVAL, NULL);	/* no parameters */
	check_stub("_Z31__device_stub__Z9scale_vecPffi", NULL, -EINVAL, NULL);	/* length past end */
	check_stub("_Z030__device_stub__Z9scale_vecPffiPffi", NULL, -EINVAL, NULL);
	check_stub("_Z99999999999999999999999999__device_stub__Z1kv", NULL, -EINVAL, NULL);
	check_stub("_Z14__device_stub_v", NULL, -EINVAL, NULL);
	check_stub("_Z15__device_stub__v", NULL, -EINVAL, NULL);
	check_stub("_ZN2ns3fooEv", NULL, -EINVAL, NULL);
	check_stub("", NULL, -EINVAL, NULL);

	/* "_Z9scale_vecPffi" is 16 chars: 17 bytes fit, 16 do not */
	CHECK(cuda_stub_kernel_name("_Z30__device_stub__Z9scale_vecPffiPffi", NULL, small, 17) == 0,
	      "exact fit");
	CHECK_STR(small, "_Z9scale_vecPffi");
	CHECK(cuda_stub_kernel_name("_Z30__device_stub__Z9scale_vecPffiPffi", NULL, small, 16) ==
	      -ENAMETOOLONG, "one short");
	CHECK(cuda_stub_kernel_name("_Z30__device_stub__Z9scale_vecPffiPffi", NULL, small, 0) ==
	      -ENAMETOOLONG, "size 0");
}

int main(void)
{
	test_demangle();
	test_stub();
	return check_done();
}
