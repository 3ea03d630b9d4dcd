"""A Python process that hangs at known places (tests/e2e/test_pyframes.py).

Main thread: <module> -> outer -> descend (1 + DEPTH times, argv[1], default 0) -> middle ->
Waiter.meth -> inner, blocked in libc's pause() through ctypes. Thread "side": Thread.run ->
side_worker -> ticker (a generator), blocked in time.sleep. Thread "coro": asyncio.run -> ...
-> co_main -> co_inner (coroutines), blocked in time.sleep. One thread started by
pthread_create (no Python state at all), blocked in pause(). Lines the test expects are marked
`# AT:<name>`. Prints "TRUTH <json>" (the side and coro threads' stacks as CPython itself
reports them, from sys._current_frames), then "READY <pid>" just before pause()."""
import asyncio
import ctypes
import json
import os
import sys
import threading
import time

side_blocked = threading.Event()
coro_blocked = threading.Event()


async def co_inner():
    coro_blocked.set()
    time.sleep(100000)  # AT:co_inner


async def co_main():
    await co_inner()  # AT:co_main


def coro_thread():
    asyncio.run(co_main())


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
    coro = threading.Thread(target=coro_thread, name="coro", daemon=True)
    coro.start()
    side_blocked.wait()
    coro_blocked.wait()
    libc = ctypes.CDLL(None)
    native = ctypes.c_ulong(0)
    assert libc.pthread_create(ctypes.byref(native), None, libc.pause, None) == 0
    # sleep() has been entered once the frames say so (set() runs just before it)
    for _ in range(500):
        truth = frames_of(side.ident)
        coro_truth = frames_of(coro.ident)
        if (truth[0][2] == ticker.__code__.co_firstlineno + 2 and
                coro_truth[0][2] == co_inner.__code__.co_firstlineno + 2):
            break
        time.sleep(0.01)
    print("TRUTH", json.dumps({"side": truth, "side_native_id": side.native_id,
                               "coro": coro_truth, "coro_native_id": coro.native_id}), flush=True)
    descend(depth)  # AT:outer


outer(int(sys.argv[1]) if len(sys.argv) > 1 else 0)  # AT:module
