"""A Python process that hangs at known places (tests/e2e/test_pyframes.py).

Main thread: <module> -> outer -> descend (1 + DEPTH times, argv[1], default 0) -> middle ->
Waiter.meth -> inner, blocked in libc's pause() through ctypes. Second thread ("side"): Thread.run -> side_worker -> ticker (a generator),
blocked in time.sleep. Lines the test expects are marked `# AT:<name>`; the test reads them
from this file. Prints "TRUTH <json>" (the side thread's stack as CPython itself reports it,
from sys._current_frames) and then "READY <pid>" once both threads are blocked."""
import ctypes
import json
import os
import sys
import threading
import time

side_blocked = threading.Event()


def ticker():
    side_blocked.set()
    time.sleep(100000)  # AT:ticker
    yield 1


def side_worker():
    for _ in ticker():  # AT:side_worker
        pass


def frames_of(thread_id):
    """The stack of another thread, innermost first, as CPython reports it."""
    out = []
    f = sys._current_frames()[thread_id]
    while f is not None:
        code = f.f_code
        out.append([getattr(code, "co_qualname", code.co_name), code.co_filename, f.f_lineno])
        f = f.f_back
    return out


def inner():
    libc = ctypes.CDLL(None)
    print("READY", os.getpid(), flush=True)
    libc.pause()  # AT:inner


class Waiter:
    def meth(self):
        inner()  # AT:meth


def middle():
    Waiter().meth()  # AT:middle


def descend(n):
    if n > 0:
        return descend(n - 1)  # AT:descend
    return middle()  # AT:descend_end


def outer(depth):
    side = threading.Thread(target=side_worker, name="side", daemon=True)
    side.start()
    side_blocked.wait()
    # sleep() has been entered once the frames say so (set() runs just before it)
    for _ in range(500):
        truth = frames_of(side.ident)
        if truth and truth[0][2] == ticker.__code__.co_firstlineno + 2:
            break
        time.sleep(0.01)
    print("TRUTH", json.dumps({"side": truth, "side_native_id": side.native_id
                               if hasattr(side, "native_id") else None}), flush=True)
    descend(depth)  # AT:outer


outer(int(sys.argv[1]) if len(sys.argv) > 1 else 0)  # AT:module
