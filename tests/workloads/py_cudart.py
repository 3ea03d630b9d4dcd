"""Python calling the REAL libcudart.so.13 (cudaGetDeviceCount) or libnccl.so.2
(ncclCommCount on a NULL communicator) through ctypes in a tight loop (tests/e2e/test_pyframes.py,
test_stacks.py). Without a GPU every call fails fast; the frames must still be right while it
runs: <module> -> main -> spin. argv[1]: the library; argv[2]: the function (default
cudaGetDeviceCount). Prints "READY <pid>"."""
import ctypes
import os
import sys


def spin(fn, args):
    print("READY", os.getpid(), flush=True)
    while True: fn(*args)  # AT:spin


def main(path, name):
    lib = ctypes.CDLL(path)
    count = ctypes.c_int(0)
    fn = getattr(lib, name)
    # ncclCommCount(comm, int *count) on a NULL comm: ncclInvalidArgument, at once
    args = (None, ctypes.byref(count)) if name.startswith("nccl") else (ctypes.byref(count),)
    fn(*args)
    spin(fn, args)  # AT:main


main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cudaGetDeviceCount")  # AT:module
