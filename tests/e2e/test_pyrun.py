"""Tier 2: the door into a running CPython (user/py/pyrun.c) through .output/e2e/pyrun_exec, on
Debian's python3 3.11 and pyenv's 3.9-3.13 (skipped with the reason where absent): a snippet
runs on the main thread at a safe point, leaves nothing in __main__ or sys, prints nothing;
a main thread blocked in C gets a refusal that names where it is, and the withdrawn request
never runs later; the borrowed thread is never one inside the allocator; unsupported and
non-Python processes get one line."""
import json
import os
import re
import signal
import subprocess
import time
from lib import (E2E_BIN, ROOT, Lines, Workload, in_syscall, need_root, python_for, tmp_path,
                 wait_in_syscall, wait_until)

PYENV = "/root/.pyenv/versions"
EXEC = os.path.join(E2E_BIN, "pyrun_exec")
BUSY = os.path.join(E2E_BIN, "libbusy_c.so")
TARGET = os.path.join(ROOT, "tests", "workloads", "pyrun_target.py")

PROBE = '''
def run(args, state):
    import sys, threading
    main = sys.modules["__main__"]
    if args.get("raise"):
        raise ValueError("boom")
    had = hasattr(sys, "_tptrace_state")
    state["n"] = n = state.get("n", 0) + 1
    if args.get("clear"):
        state.clear()
    if args.get("marker"):
        with open(args["marker"], "w") as f:
            f.write("ran")
    return {"echo": args["echo"], "n": n, "tid": threading.get_native_id(),
            "is_main": threading.current_thread() is threading.main_thread(),
            "main_names": sorted(vars(main)), "has_state": had,
            "version": "%d.%d.%d" % sys.version_info[:3]}
'''


def snippet():
    path = tmp_path("pyrun_probe.py")
    with open(path, "w") as f:
        f.write(PROBE)
    return path


def door(pid, args, timeout_ms=5000, count=1, env=None, keep=False):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([EXEC, str(pid), snippet(), json.dumps(args), str(timeout_ms), str(count)]
                       + (["keep"] if keep else []),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                       env=e)
    lines = p.stdout.splitlines()
    return p.returncode, lines, p.stderr


def target(python, *args):
    python_for(python, EXEC)
    return Workload([python, TARGET] + [str(a) for a in args])


def check_clean(w):
    """the target printed only its own lines and runs on"""
    n = len([l for l in w.out.lines if l.startswith("tick")])
    assert w.out.wait_for(lambda l: l.startswith("tick") and
                          len([x for x in w.out.lines if x.startswith("tick")]) > n + 2, 20), \
        w.out.text()[-500:]
    assert w.p.poll() is None
    w.finish()
    assert w.err.text() == "", w.err.text()
    bad = [l for l in w.out.lines if not re.fullmatch(r"READY \d+|tick \d+|AWAKE", l)]
    assert not bad, bad


def check_version(python):
    w = target(python, "spin")
    try:
        w.out.wait_for(lambda l: l.startswith("tick"), 20)
        echo = {"s": "quote ' backslash \\ newline \n e\u0301 \u00e9 \U0001f600", "i": -3,
                "f": 0.5, "b": [True, False, None], "d": {"k": "v"}}
        rc, lines, err = door(w.pid, {"echo": echo}, count=3)
        assert rc == 0, (lines, err)
        res = [json.loads(l) for l in lines[1:]]
        assert len(res) == 3, lines
        for i, r in enumerate(res):
            assert r["echo"] == echo, r["echo"]
            assert r["n"] == i + 1, res              # state kept between calls
            assert r["tid"] == w.pid and r["is_main"], r
            assert r["has_state"] is (i > 0), res    # set after the first call
            assert r["main_names"] == res[0]["main_names"], (r, res[0])
        assert not [n for n in res[0]["main_names"] if "tp" in n or n == "run"], res[0]
        assert lines[0] == f"version {res[0]['version']}", lines
        # a snippet that raises: its error comes back, nothing is printed in the target
        rc, lines, err = door(w.pid, {"echo": 1, "raise": True})
        assert rc == 0 and json.loads(lines[1]) == {"error": "ValueError: boom"}, (lines, err)
        # the state attribute goes away with its last entry
        rc, lines, _ = door(w.pid, {"echo": 1, "clear": True})
        r = json.loads(lines[1])
        assert rc == 0 and r["n"] == 1 and r["has_state"] is True, lines   # the first door's
        check_clean(w)
    finally:
        w.kill()


def pyenv(v):
    return os.path.join(PYENV, v, "bin", "python3")


def test_debian_3_11():
    check_version("/usr/bin/python3")


def test_pyenv_3_9():
    check_version(pyenv("3.9.18"))


def test_pyenv_3_10():
    check_version(pyenv("3.10.13"))


def test_pyenv_3_12():
    check_version(pyenv("3.12.1"))


def test_pyenv_3_13():
    check_version(pyenv("3.13.0"))


def test_single_threaded_python_loop():
    """the only thread runs Python: it is borrowed (running in the eval loop is safe; named
    interpreter code such as _PyEval_EvalFrameDefault is not on the unsafe list)"""
    for python in ("/usr/bin/python3", pyenv("3.12.1")):
        if not os.access(python, os.X_OK):
            continue
        w = target(python, "solo")
        try:
            assert os.listdir(f"/proc/{w.pid}/task") == [str(w.pid)]
            rc, lines, err = door(w.pid, {"echo": 3}, env={"TPTRACE_PYRUN_DEBUG": "1"})
            assert rc == 0 and json.loads(lines[1])["echo"] == 3, (lines, err)
            assert f"pyrun: borrowed thread {w.pid} " in err, err
        finally:
            w.kill()


def test_state_is_removed():
    """a snippet whose state empties leaves no attribute on sys"""
    w = target("/usr/bin/python3", "spin")
    try:
        rc, lines, _ = door(w.pid, {"echo": 0, "clear": True}, count=2)
        assert rc == 0 and [json.loads(l)["has_state"] for l in lines[1:]] == [False, False], \
            lines
        rc, lines, _ = door(w.pid, {"echo": 0})
        r = json.loads(lines[1])
        # a new door (its own key) sees no state: the cleared one left nothing behind
        assert r["n"] == 1 and r["has_state"] is False, r
    finally:
        w.kill()


def wake(w):
    """ends a "sleep" target's sleep (SIGUSR1) once it has been refused"""
    os.kill(w.pid, signal.SIGUSR1)


def test_blocked_in_sleep_is_refused_and_withdrawn():
    """the main thread sleeps in C: refused after the timeout, naming where it is; when it
    wakes, the withdrawn request does not run; a new one does. The target sleeps until told
    (SIGUSR1), so the refusal comes before it wakes however slow the machine is."""
    w = target("/usr/bin/python3", "sleep", 600)
    marker = tmp_path("pyrun_withdrawn")
    if os.path.exists(marker):
        os.unlink(marker)
    try:
        wait_in_syscall(w.pid, "clock_nanosleep", tid=w.pid)
        t0 = time.monotonic()
        rc, lines, err = door(w.pid, {"echo": 0, "marker": marker}, timeout_ms=800)
        took = time.monotonic() - t0
        assert rc == 1 and len(lines) == 2, (lines, err)
        assert lines[1].startswith("error: exec: ETIMEDOUT: "), lines
        assert "reached no safe point" in lines[1] and "clock_nanosleep" in lines[1] and \
            "withdrawn" in lines[1], lines[1]
        # it waited its whole timeout (a lower bound: load only lengthens it)
        assert took >= 0.8, took
        assert "AWAKE" not in w.out.lines, w.out.text()
        wake(w)
        assert w.out.wait_for(lambda l: l == "AWAKE", 10), w.out.text()
        # a pending request runs at the first safe point; "tick" comes 200,000 loop turns
        # after AWAKE, so a withdrawal that failed has written the marker by then
        assert w.out.wait_for(lambda l: l.startswith("tick"), 10)
        assert not os.path.exists(marker), "the withdrawn request ran"
        rc, lines, err = door(w.pid, {"echo": 7})
        assert rc == 0 and json.loads(lines[1])["echo"] == 7, (lines, err)
        check_clean(w)
    finally:
        w.kill()


def test_keep_queued_runs_later():
    """a cleanup request (PYRUN_KEEP_QUEUED) is not withdrawn: it runs when the main thread is
    back in Python, after the door has gone"""
    w = target("/usr/bin/python3", "sleep", 600)
    marker = tmp_path("pyrun_kept")
    if os.path.exists(marker):
        os.unlink(marker)
    try:
        wait_in_syscall(w.pid, "clock_nanosleep", tid=w.pid)
        rc, lines, err = door(w.pid, {"echo": 0, "marker": marker}, timeout_ms=500, keep=True)
        assert rc == 1 and "ETIMEDOUT" in lines[1] and "stays queued" in lines[1], (lines, err)
        assert "AWAKE" not in w.out.lines, w.out.text()
        wake(w)
        assert w.out.wait_for(lambda l: l == "AWAKE", 10), w.out.text()
        # the request runs at the first safe point after AWAKE, before the first "tick"
        assert w.out.wait_for(lambda l: l.startswith("tick"), 10), w.out.text()
        assert os.path.exists(marker), "the kept request did not run"
        check_clean(w)
    finally:
        w.kill()


def test_running_c_is_refused():
    w = target("/usr/bin/python3", "cspin", 3, BUSY)
    try:
        rc, lines, _ = door(w.pid, {"echo": 0}, timeout_ms=500)
        assert rc == 1 and "ETIMEDOUT" in lines[1] and "running, not in the eval loop" in \
            lines[1], lines
        assert w.out.wait_for(lambda l: l == "AWAKE", 10)
        check_clean(w)
    finally:
        w.kill()


def test_never_borrows_a_thread_in_the_allocator():
    """the main thread is in malloc/free (C) most of the time, a second thread sleeps: no
    request may borrow a thread stopped inside the allocator (Debian's libc has no local
    symbols: a running thread at a place no symbol names counts as unsafe too)"""
    w = target("/usr/bin/python3", "malloc", 6, BUSY)
    borrowed, skipped = [], []
    try:
        for _ in range(12):
            rc, lines, err = door(w.pid, {"echo": 0}, timeout_ms=50,
                                  env={"TPTRACE_PYRUN_DEBUG": "1"})
            assert rc == 1 and "ETIMEDOUT" in lines[-1], (lines, err)
            for l in err.splitlines():
                m = re.match(r"pyrun: (borrowed|skipped) thread (\d+) in (.*) \(syscall (-?\d+)\)$", l)
                if m:
                    (borrowed if m[1] == "borrowed" else skipped).append(
                        (int(m[2]), m[3], int(m[4])))
        assert len(borrowed) == 12, (borrowed, skipped)
        alloc = re.compile(r"^(malloc|free|_int_|__libc_|cfree|tcache|arena|sysmalloc)|^libc\.so")
        assert not [b for b in borrowed if alloc.search(b[1])], borrowed
        assert [s for s in skipped if s[0] == w.pid and alloc.search(s[1])], skipped
        assert w.out.wait_for(lambda l: l == "AWAKE", 15)
        check_clean(w)
    finally:
        w.kill()


def test_code_pages_are_unmapped():
    w = target("/usr/bin/python3", "spin")
    try:
        rc, lines, err = door(w.pid, {"echo": 0}, count=5, env={"TPTRACE_PYRUN_DEBUG": "1"})
        assert rc == 0, (lines, err)
        pages = re.findall(r"code page 0x([0-9a-f]+)-0x([0-9a-f]+)", err)
        assert len(pages) == 5, err
        with open(f"/proc/{w.pid}/maps") as f:
            maps = [tuple(int(x, 16) for x in l.split()[0].split("-")) for l in f]
        for a, b in pages:
            a, b = int(a, 16), int(b, 16)
            assert not [m for m in maps if m[0] <= a < m[1]], (hex(a), "still mapped")
    finally:
        w.kill()


def test_unsupported_and_not_python():
    py38 = pyenv("3.8.18")
    python_for(py38, EXEC)
    w = Workload([py38, TARGET, "spin"])
    try:
        rc, lines, _ = door(w.pid, {"echo": 0})
        assert rc == 1 and len(lines) == 1, lines
        assert re.match(r"error: open: E(OPNOTSUPP|NOTSUP): process \d+: Python 3\.8\.\d+.*unsupported", lines[0]), lines
    finally:
        w.kill()
    p = subprocess.Popen(["sleep", "30"])
    try:
        rc, lines, _ = door(p.pid, {"echo": 0})
        assert rc == 1 and lines == [f"error: open: ENOENT: process {p.pid} runs no CPython "
                                     "interpreter"], lines
    finally:
        p.kill()
        p.wait()
    rc, lines, _ = door(999999999, {"echo": 0})
    assert rc == 1 and lines == ["error: open: ESRCH: no process 999999999"], lines


def traced(pid):
    """True while a thread of pid has a tracer (the door's injector borrows one)"""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                if re.search(r"TracerPid:\s+[1-9]", f.read()):
                    return True
        except OSError:
            pass
    return False


def test_process_exits_while_waiting():
    """the target dies while its request is queued (it sleeps until told): the door says so
    in one ESRCH line. Queued: the door borrowed a thread (TPTRACE_PYRUN_DEBUG), let it go
    again and sleeps between its polls for the result."""
    w = target("/usr/bin/python3", "sleep", 600)
    try:
        wait_in_syscall(w.pid, "clock_nanosleep", tid=w.pid)
        p = subprocess.Popen([EXEC, str(w.pid), snippet(), json.dumps({"echo": 0}), "60000", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TPTRACE_PYRUN_DEBUG="1"))
        out, err = Lines(p.stdout), Lines(p.stderr)
        assert err.wait_for(lambda l: l.startswith("pyrun: borrowed thread"), 30), err.text()
        wait_until(lambda: not traced(w.pid) and in_syscall(p.pid, p.pid, "clock_nanosleep"),
                   30, "the door to queue the request and poll for its result")
        w.kill()
        rc = p.wait(60)
        out.t.join(5)
        lines = out.lines
        assert rc == 1 and "ESRCH" in lines[-1] and "exited before the snippet ran" in \
            lines[-1], lines
    finally:
        w.kill()


def test_target_of_another_user():
    """files and directory belong to the target's user: a process running as nobody can claim
    the request and write its result"""
    python_for("/usr/bin/python3", EXEC)

    def drop():
        os.setgid(65534)
        os.setuid(65534)
    w = Workload(["/usr/bin/python3", TARGET, "spin"], preexec_fn=drop)
    try:
        rc, lines, err = door(w.pid, {"echo": 5})
        assert rc == 0 and json.loads(lines[1])["echo"] == 5, (lines, err)
        check_clean(w)
    finally:
        w.kill()


def test_target_with_its_own_tmp():
    """a target in its own mount namespace (a private /tmp, as in a container): the private
    directory is made in the target's /tmp, through /proc/PID/root"""
    python_for("/usr/bin/python3", EXEC)
    before = {d for d in os.listdir("/tmp") if d.startswith("tptrace-py-")}
    # the script is read before the mount: the checkout itself may live under /tmp
    w = Workload(["unshare", "-m", "--propagation", "private", "sh", "-c",
                  'src=$(cat "$0") && mount -t tmpfs tptrace-test /tmp && '
                  'exec /usr/bin/python3 -c "$src" spin', TARGET])
    try:
        rc, lines, err = door(w.pid, {"echo": 6}, env={"TPTRACE_PYRUN_DEBUG": "1"})
        assert rc == 0 and json.loads(lines[1])["echo"] == 6, (lines, err)
        after = {d for d in os.listdir("/tmp") if d.startswith("tptrace-py-")}
        assert after == before, after - before
        check_clean(w)
    finally:
        w.kill()
