"""A Python training loop on the simulated runtime through ctypes, for `tptrace report --step`
(tests/e2e/test_report.py). py_train.py LIBCUDART STEPS. Prints "READY <pid>", waits for a
line on stdin, then per step:
  train_step(): cudaMemsetAsync(dev, 0, 4096, 0) x3, then cudaStreamSynchronize(0)
  log_step():   cudaDeviceSynchronize()
(log_step makes a call between two train_step activations, so each is its own
python_function slice), prints "DONE" and exits a second later."""
import ctypes
import os
import sys
import time


def train_step(rt, dev):
    for _ in range(3):
        rt.cudaMemsetAsync(dev, 0, ctypes.c_size_t(4096), None)
    rt.cudaStreamSynchronize(None)


def log_step(rt):
    rt.cudaDeviceSynchronize()


def main(path, steps):
    rt = ctypes.CDLL(path)
    rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                   ctypes.c_void_p]
    rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    dev = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
    print("READY", os.getpid(), flush=True)
    sys.stdin.readline()
    for _ in range(steps):
        train_step(rt, dev)
        log_step(rt)
    print("DONE", flush=True)
    # stay a moment: tptrace reads the code objects of new stacks from the live process
    time.sleep(1)


main(sys.argv[1], int(sys.argv[2]))
