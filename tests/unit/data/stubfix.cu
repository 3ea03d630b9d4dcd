// SPDX-License-Identifier: MIT
/* Fixture for test_elfsym: nvcc's host stubs, their function-local statics and the static
 * cudart's local __cudaLaunchKernel. Never run, only read. */
__global__ void scale_vec(float *x, float a, int n)
{
	int i = threadIdx.x;

	if (i < n)
		x[i] *= a;
}

namespace ns {
template <typename T> __global__ void tk(T *p, int n)
{
	if (n)
		p[0] = 0;
}
}

int main()
{
	float *x = 0;
	int *p = 0;

	scale_vec<<<1, 1>>>(x, 2.0f, 0);
	ns::tk<int><<<1, 1>>>(p, 0);
	return 0;
}
