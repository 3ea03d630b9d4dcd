"""A torch 2.x process (the test venv's, tests/venv/) calling the CUDA runtime that torch's wheel
brought (site-packages/nvidia/*/lib/libcudart.so.*, the copy torch itself loaded: found in
/proc/self/maps) through ctypes with known arguments (tests/e2e/test_torch2.py). Without a GPU
every call fails, but its entry is what tptrace decodes. Prints "READY <pid>" and the runtime's
path, waits for a line on stdin, makes the calls once, prints "DONE", then waits for a line.

x86-64 SysV, as the runtime's own ABI has it: cudaLaunchKernel(func, dim3 grid, dim3 block,
void **args, size_t shmem, cudaStream_t stream) takes each dim3 in two registers (x | y << 32,
then z); CUDA 12+ wheels have no __cudaLaunchKernel, so this is the launch path."""
import ctypes
import os
import sys

import torch  # loads libtorch_cuda and, through it, the wheel's libcudart


def loaded_cudart():
    with open("/proc/self/maps") as f:
        paths = {l.split()[-1] for l in f if "/libcudart.so" in l}
    assert len(paths) == 1, paths
    return paths.pop()


def main():
    path = loaded_cudart()
    rt = ctypes.CDLL(path)
    launch = rt.cudaLaunchKernel
    launch.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64,
                       ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    memcpy_async = rt.cudaMemcpyAsync
    memcpy_async.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                             ctypes.c_void_p]
    sync = rt.cudaStreamSynchronize
    sync.argtypes = [ctypes.c_void_p]
    kargs = (ctypes.c_void_p * 1)()
    buf = ctypes.create_string_buffer(64)
    print("READY", os.getpid(), flush=True)
    print("CUDART", path, "TORCH", torch.__version__, flush=True)
    sys.stdin.readline()
    launch(ctypes.cast(launch, ctypes.c_void_p), 11 | (12 << 32), 13, 32 | (4 << 32), 2,
           kargs, 4096, 0x5100)
    memcpy_async(buf, buf, 40, 2, 0x5100)  # cudaMemcpyDeviceToHost
    sync(0x5100)
    print("DONE", flush=True)
    sys.stdin.readline()


main()
