"""Python calling the REAL libcudart.so.13 through ctypes in a tight loop
(tests/e2e/test_pyframes.py). Without a GPU every call fails fast; the frames must still be
right while it runs: <module> -> main -> spin. argv[1]: the library. Prints "READY <pid>"."""
import ctypes
import os
import sys


def spin(fn, ref):
    print("READY", os.getpid(), flush=True)
    while True: fn(ref)  # AT:spin


def main(path):
    cudart = ctypes.CDLL(path)
    count = ctypes.c_int(0)
    fn = cudart.cudaGetDeviceCount
    fn(ctypes.byref(count))
    spin(fn, ctypes.byref(count))  # AT:main


main(sys.argv[1])  # AT:module
