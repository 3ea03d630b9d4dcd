/* SPDX-License-Identifier: MIT */
/* The api id a record carries for a CUDA or NCCL symbol, for unit tests that build ring records
 * by hand; an unknown symbol ends the test (exit 2): the tables changed under it. */
#ifndef TPTRACE_TEST_API_ID_H
#define TPTRACE_TEST_API_ID_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_api.h"
#include "nccl_api.h"

static inline int api_id(const char *sym)
{
	for (int i = 0; i < nccl_api_count; i++)
		if (!strcmp(nccl_apis[i].symbol, sym))
			return NCCL_API_BASE + i;
	for (int i = 0; i < cuda_api_count; i++)
		if (!strcmp(cuda_apis[i].symbol, sym))
			return i;
	fprintf(stderr, "no api %s\n", sym);
	exit(2);
}

#endif
