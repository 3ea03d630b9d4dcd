"""A torch 2.x process (the test venv's) calling the NCCL that torch's wheel brought
(site-packages/nvidia/nccl/lib/libnccl.so.2, the copy torch loaded) through ctypes
(tests/e2e/test_torch2.py): ncclCommInitRank(&comm, 4, id = bytes 0..127, 2), which fails
without a GPU (rc 1, ncclUnhandledCudaError), and ncclAllReduce on a NULL communicator
(rc 4, ncclInvalidArgument). argv[1], optional: a copy of the toolkit's driver stub named
libcuda.so.1, loaded first so the process maps a driver (calls into it fail). Prints
"READY <pid>" and the library's path, waits for a line, calls, prints "DONE", waits for a
line."""
import ctypes
import os
import sys

import torch  # loads libtorch_cuda and, through it, the wheel's libnccl and libcudart


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * 128)]


def loaded(name):
    with open("/proc/self/maps") as f:
        paths = {l.split()[-1] for l in f if "/" + name in l}
    assert len(paths) == 1, paths
    return paths.pop()


def main():
    if len(sys.argv) > 1:
        ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    path = loaded("libnccl.so")
    nccl = ctypes.CDLL(path)
    init = nccl.ncclCommInitRank
    init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    allreduce = nccl.ncclAllReduce
    allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    uid = UniqueId()
    for i in range(128):
        uid.internal[i] = i
    comm = ctypes.c_void_p()
    print("READY", os.getpid(), flush=True)
    print("NCCL", path, flush=True)
    sys.stdin.readline()
    rc_init = init(ctypes.byref(comm), 4, uid, 2)
    # ncclFloat16 = 6, ncclMax = 2
    rc_ar = allreduce(0x1000, 0x2000, 12345, 6, 2, None, 0x5100)
    if len(sys.argv) > 1:
        # a first runtime call, so the runtime loads the driver (the stub: it fails)
        cnt = ctypes.c_int(0)
        ctypes.CDLL(loaded("libcudart.so")).cudaGetDeviceCount(ctypes.byref(cnt))
    print("RC", rc_init, rc_ar, flush=True)
    print("DONE", flush=True)
    sys.stdin.readline()


main()
