"""Threads that wait in place, some in a loop and some for good (tests/e2e/test_stacks.py
test_python_polling_loop_progresses). Thread "poller": `while True: time.sleep(0.01)`; thread
"ticker": `while True: Event().wait(0.01)` (a futex with a timeout); thread "sleeper":
time.sleep(100000) once; the main thread waits on an Event that is never set. Prints
"TID <name> <native id>" per thread, then "READY <pid>" once every thread has started (the test
waits in /proc for each to be in its wait)."""
import os
import threading
import time

started = threading.Barrier(4)


def poller():
    started.wait()
    while True:
        time.sleep(0.01)


def ticker():
    ev = threading.Event()
    started.wait()
    while True:
        ev.wait(0.01)


def sleeper():
    started.wait()
    time.sleep(100000)


for fn in (poller, ticker, sleeper):
    threading.Thread(target=fn, name=fn.__name__, daemon=True).start()
started.wait()
for t in threading.enumerate():
    print("TID", t.name, t.native_id, flush=True)
print("READY", os.getpid(), flush=True)
threading.Event().wait()
