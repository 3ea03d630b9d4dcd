/* SPDX-License-Identifier: MIT */
#ifndef TPTRACE_DEMANGLE_H
#define TPTRACE_DEMANGLE_H

/* Demangled C++ name via the C++ ABI demangler (__cxa_demangle); a malloc'ed copy of the
 * input when it is not a mangled name. NULL only on ENOMEM. */
char *demangle(const char *name);

/* Kernel name from a CUDA host-stub static or stub function symbol:
 *   "_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle"  -> "_Z9scale_vecPffi"
 *   "_ZZL32__device_stub__ZN2ns2tkIiEEvPT_iPiiE8__handle" -> "_ZN2ns2tkIiEEvPT_i"
 *   "_Z30__device_stub__Z9scale_vecPffiPffi"              -> "_Z9scale_vecPffi"
 *   "_ZL32__device_stub__ZN2ns2tkIiEEvPT_iPii"            -> "_ZN2ns2tkIiEEvPT_i"
 * Writes the mangled kernel name into buf. Returns 0, or -EINVAL when sym is not a device stub
 * (or, for statics, when its local name differs from want_static, e.g. "__handle"; want_static
 * NULL accepts function symbols only), -ENAMETOOLONG when buf is too small. */
int cuda_stub_kernel_name(const char *sym, const char *want_static, char *buf, int size);

#endif
