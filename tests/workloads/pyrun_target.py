"""A Python process for the door's tests (tests/e2e/test_pyrun.py). Prints "READY <pid>" and
then, by mode (argv[1]):
  spin           the main thread runs Python: counts, printing "tick N" every 200,000
  sleep SEC      the main thread sleeps SEC s in C (time.sleep), or until SIGUSR1, then prints
                 "AWAKE" and spins (tests wake it with SIGUSR1: its sleep ends when they say)
  malloc SEC     the main thread is in C doing malloc/free for SEC s (libbusy_c.so, argv[3]);
                 a second thread sleeps in Python; then "AWAKE" and spins
  cspin SEC      the main thread computes in C (no calls) for SEC s, then "AWAKE" and spins
  solo           one thread only (no stdin watcher): the main thread runs Python for 20 s
It stops after 60 s or when stdin closes. Its only output is those lines."""
import ctypes
import os
import signal
import sys
import threading
import time


def spin(secs=60):
    i = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        i += 1
        if i % 200000 == 0:
            print("tick", i, flush=True)


class Wake(Exception):
    pass


def on_usr1(sig, frame):
    raise Wake()


def watch_stdin():
    sys.stdin.read()
    os._exit(0)


def main():
    mode = sys.argv[1]
    if mode == "solo":
        print("READY", os.getpid(), flush=True)
        spin(20)
        return
    threading.Thread(target=watch_stdin, daemon=True).start()
    if mode == "malloc":
        threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
    print("READY", os.getpid(), flush=True)
    if mode == "sleep":
        signal.signal(signal.SIGUSR1, on_usr1)
        try:
            time.sleep(float(sys.argv[2]))
        except Wake:
            pass
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        print("AWAKE", flush=True)
    elif mode in ("malloc", "cspin"):
        lib = ctypes.CDLL(sys.argv[3])
        fn = lib.busy_malloc if mode == "malloc" else lib.busy_spin
        fn.argtypes = [ctypes.c_double]
        fn(float(sys.argv[2]))
        print("AWAKE", flush=True)
    spin()


main()
