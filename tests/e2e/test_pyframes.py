"""Python frames read from outside (user/py/pyframes.c) on real CPython 3.9-3.13 processes.

tests/workloads/py_hang.py hangs at lines marked `# AT:<name>`; the expected main-thread
stack comes from those markers, the second thread's from CPython itself (sys._current_frames,
printed by the workload as TRUTH) and from the markers. .output/e2e/pyframes_dump stops every
thread (PTRACE_SEIZE + INTERRUPT), reads fs_base, prints each thread's frames as JSON."""
import json
import os
import re
import shutil
import subprocess

from lib import (E2E_BIN, ROOT, Skip, Workload, need_root, python_for, tmp_path, wait_cpu,
                 wait_in_syscall)

DUMP = os.path.join(E2E_BIN, "pyframes_dump")
HANG = os.path.join(ROOT, "tests", "workloads", "py_hang.py")
CUDART_PY = os.path.join(ROOT, "tests", "workloads", "py_cudart.py")
CUDART = "/usr/local/cuda/lib64/libcudart.so.13"
PYENV = "/root/.pyenv/versions"
DEBIAN_PY = "/usr/bin/python3"


def markers(path):
    """{name: line} of every `# AT:name` in a workload."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            m = re.search(r"# AT:(\w+)", line)
            if m:
                out[m.group(1)] = n
    return out


def dump(pid, *extra):
    p = subprocess.run([DUMP, str(pid), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    head, threads = lines[0], {t["tid"]: t for t in lines[1:]}
    return head, threads


def triples(thread):
    return [(f["func"], f["file"], f["line"]) for f in thread["frames"]]


def entries(thread):
    return [f["entry"] for f in thread["frames"]]


def interpreter(path):
    return python_for(path, DUMP)


def version_of(py):
    return subprocess.run([py, "-c", "import platform; print(platform.python_version())"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def expected_main(minor, depth=0):
    at = markers(HANG)
    meth = "Waiter.meth" if minor >= 11 else "meth"
    frames = [("inner", HANG, at["inner"]), (meth, HANG, at["meth"]),
              ("middle", HANG, at["middle"]), ("descend", HANG, at["descend_end"])]
    frames += [("descend", HANG, at["descend"])] * depth
    frames += [("outer", HANG, at["outer"]), ("<module>", HANG, at["module"])]
    return frames


def expected_entries(minor, depth=0):
    """Which frames start an eval-loop activation (native _PyEval_EvalFrameDefault frames;
    checked against gdb's backtraces of the same workload). 3.9/3.10: every frame. 3.11+: the
    module (run from C) on the main thread, where Python-to-Python calls are inlined; on the
    side thread Thread._bootstrap (called from C) and the generator, resumed by the generic
    FOR_ITER through tp_iternext; in 3.11 also side_worker, which Thread.run calls through
    CALL_FUNCTION_EX -> PyObject_Call (3.12 inlines that call)."""
    main_len = 6 + depth
    if minor <= 10:
        return [True] * main_len, [True] * 5
    main = [False] * (main_len - 1) + [True]
    side = [True, minor == 11, False, False, True]
    return main, side


def check_hang(py, minor, env=None, after_start=None):
    at = markers(HANG)
    want_main = expected_main(minor)
    version = version_of(py)
    wl = Workload([py, HANG], env=env)
    try:
        if after_start:
            after_start()
        truth = json.loads(wl.out.wait_for(lambda l: l.startswith("TRUTH"), 10)[6:])
        side_tid = truth["side_native_id"]
        side_truth = [tuple(f) for f in truth["side"]]
        # CPython's own view agrees with the markers for the workload's frames
        assert side_truth[:2] == [("ticker", HANG, at["ticker"]),
                                  ("side_worker", HANG, at["side_worker"])], side_truth
        assert len(side_truth) == 5 and all(f[1].endswith("threading.py") for f in side_truth[2:])
        # READY is printed just before pause(): wait until the main thread is in it
        wait_in_syscall(wl.pid, "pause", tid=wl.pid)
        head, threads = dump(wl.pid)
        assert head["version"] == version, head
        coro_tid = truth["coro_native_id"]
        assert len(threads) == 4 and set(threads) > {wl.pid, side_tid, coro_tid}, threads.keys()
        (native,) = [t for tid, t in threads.items() if tid not in (wl.pid, side_tid, coro_tid)]
        assert native["ret"] == -2, native  # -ENOENT: a thread without Python
        main, side = threads[wl.pid], threads[side_tid]
        assert main["ret"] == len(want_main) and triples(main) == want_main, (main, want_main)
        assert side["ret"] == 5 and triples(side) == side_truth, (side, side_truth)
        want_main_entry, want_side_entry = expected_entries(minor)
        assert entries(main) == want_main_entry, main
        assert entries(side) == want_side_entry, side
        # coroutines: co_main is resumed by the C Task step (an eval activation of its own);
        # co_inner is awaited through SEND, which calls back into C before 3.12 and pushes
        # the frame inline since (counts checked against gdb's _PyEval_EvalFrameDefault frames)
        coro = threads[coro_tid]
        coro_truth = [tuple(f) for f in truth["coro"]]
        assert coro_truth[:2] == [("co_inner", HANG, at["co_inner"]),
                                  ("co_main", HANG, at["co_main"])], coro_truth
        assert triples(coro) == coro_truth, (coro, coro_truth)
        assert entries(coro)[:2] == [minor <= 11, True], coro
        want_coro_entries = len(coro_truth) if minor <= 10 else 4 if minor == 11 else 2
        assert sum(entries(coro)) == want_coro_entries, coro
    finally:
        wl.kill()


def pyenv(version):
    return interpreter(os.path.join(PYENV, version, "bin", "python"))


def test_debian_3_11_static():
    """Debian's python3: libpython linked into the executable (.PyRuntime section)."""
    check_hang(interpreter(DEBIAN_PY), 11)


def test_pyenv_3_9():
    check_hang(pyenv("3.9.18"), 9)


def test_pyenv_3_10():
    check_hang(pyenv("3.10.13"), 10)


def test_pyenv_3_11():
    check_hang(pyenv("3.11.7"), 11)


def test_pyenv_3_12():
    check_hang(pyenv("3.12.1"), 12)


def test_pyenv_3_13():
    check_hang(pyenv("3.13.0"), 13)


def test_deleted_executable():
    """The static interpreter's file deleted after start: read through /proc/PID/map_files."""
    py = interpreter(DEBIAN_PY)
    copy = os.path.join(tmp_path("pydel"), "python3")
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    shutil.copy(os.path.realpath(py), copy)
    try:
        check_hang(copy, 11, after_start=lambda: os.unlink(copy))
    finally:
        if os.path.exists(copy):
            os.unlink(copy)


def test_deleted_libpython():
    """libpython3.12.so deleted after start (LD_LIBRARY_PATH beats pyenv's RUNPATH)."""
    py = pyenv("3.12.1")
    libdir = tmp_path("pydel-lib")
    os.makedirs(libdir, exist_ok=True)
    lib = os.path.join(libdir, "libpython3.12.so.1.0")
    shutil.copy(os.path.join(PYENV, "3.12.1", "lib", "libpython3.12.so.1.0"), lib)

    def delete():
        with open(f"/proc/{pid_of_lib()}/maps") as f:
            assert lib + " (deleted)" not in f.read()
        os.unlink(lib)

    def pid_of_lib():
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and lib in open(f"/proc/{d}/maps").read():
                    return int(d)
            except OSError:
                pass
        raise AssertionError(f"no process maps {lib}")

    try:
        check_hang(py, 12, env={"LD_LIBRARY_PATH": libdir}, after_start=delete)
    finally:
        if os.path.exists(lib):
            os.unlink(lib)


def test_pid_namespace():
    """A container-like target (own pid namespace): native_thread_id is the tid in there."""
    py = interpreter(DEBIAN_PY)
    if not shutil.which("unshare"):
        raise Skip("unshare absent")
    wl = Workload(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", py, HANG])
    pid = None
    try:
        with open(f"/proc/{wl.p.pid}/task/{wl.p.pid}/children") as f:
            pid = int(f.read().split()[0])
        with open(f"/proc/{pid}/status") as f:
            assert re.search(r"NSpid:\s+%d\s+1\n" % pid, f.read())
        truth = json.loads(wl.out.wait_for(lambda l: l.startswith("TRUTH"), 10)[6:])
        want_main = expected_main(11)
        wait_in_syscall(pid, "pause", tid=pid)
        head, threads = dump(pid)
        assert triples(threads[pid]) == want_main, threads[pid]
        for name in ("side", "coro"):
            (t,) = [t for t in threads.values() if t["frames"] and
                    t["frames"][0]["func"] == truth[name][0][0]]
            assert triples(t) == [tuple(f) for f in truth[name]], t
    finally:
        if pid:  # pid 1 of its namespace: only SIGKILL ends it
            os.kill(pid, 9)
        wl.kill()


def test_deep_stack_and_speed():
    """A 50-frame stack read exactly; prints the time of one pyframes__thread call."""
    py = interpreter(DEBIAN_PY)
    depth = 44
    want = expected_main(11, depth)
    assert len(want) == 50
    wl = Workload([py, HANG, str(depth)])
    try:
        wait_in_syscall(wl.pid, "pause", tid=wl.pid)
        head, threads = dump(wl.pid, "--bench", "2000")
        main = threads[wl.pid]
        assert triples(main) == want, main
        assert entries(main) == expected_entries(11, depth)[0]
        print(f"pyframes__thread, 50 frames: {main['us']:.1f} us")
    finally:
        wl.kill()


def test_unsupported_version():
    py = pyenv("3.8.18")
    wl = Workload([py, HANG])
    try:
        head, threads = dump(wl.pid)
        assert head == {"pid": wl.pid, "version": None,
                        "err": "Python 3.8.18: unsupported (3.9-3.13)"}, head
        assert threads == {}
    finally:
        wl.kill()


def test_not_python():
    need_root()
    p = subprocess.Popen(["sleep", "100"])
    try:
        wait_in_syscall(p.pid, "clock_nanosleep", tid=p.pid)     # exec'd and asleep
        head, threads = dump(p.pid)
        assert head == {"pid": p.pid, "version": None, "err": ""}, head
    finally:
        p.kill()
        p.wait()


def test_real_cudart_loop():
    """A thread running ctypes calls into the real libcudart.so.13: every sample exact."""
    py = interpreter(DEBIAN_PY)
    if not os.path.exists(CUDART):
        raise Skip(f"{CUDART} absent")
    at = markers(CUDART_PY)
    want = [("spin", CUDART_PY, at["spin"]), ("main", CUDART_PY, at["main"]),
            ("<module>", CUDART_PY, at["module"])]
    wl = Workload([py, CUDART_PY, CUDART])
    try:
        with open(f"/proc/{wl.pid}/maps") as f:
            assert "libcudart.so.13" in f.read()
        wait_cpu(wl.pid)    # past READY's print: 20 ms of CPU in the loop
        for _ in range(10):
            head, threads = dump(wl.pid)
            assert triples(threads[wl.pid]) == want, threads[wl.pid]
            assert entries(threads[wl.pid]) == [False, False, True]
    finally:
        wl.kill()


def test_line_tables_match_cpython():
    """pyframes_line() on every instruction of ~1,100 stdlib code objects per version equals
    CPython's own line (3.9 lnotab, 3.10 linetable, 3.11+ location table)."""
    lines_bin = os.path.join(E2E_BIN, "pyframes_lines")
    script = os.path.join(ROOT, "tests", "workloads", "py_linetables.py")
    pys = [DEBIAN_PY] + [os.path.join(PYENV, v, "bin", "python")
                         for v in ("3.9.18", "3.10.13", "3.11.7", "3.12.1", "3.13.0")]
    pys = [p for p in pys if os.access(p, os.X_OK)]
    if not pys:
        raise Skip("no Python 3.9-3.13 interpreter present")
    for py in pys:
        tables = subprocess.run([py, script], stdout=subprocess.PIPE, check=True).stdout
        p = subprocess.run([lines_bin], input=tables, stdout=subprocess.PIPE, timeout=120)
        out = p.stdout.decode()
        assert p.returncode == 0, f"{py}: {out}"
        codes, insns = re.search(r"codes (\d+) instructions (\d+) mismatches 0", out).groups()
        assert int(codes) > 500 and int(insns) > 20000, (py, out)


def test_torn_reads_running_target():
    """Read a target that churns threads, frames and code objects WITHOUT stopping it: every
    call returns frames or -EFAULT/-ENOENT (never crashes, hangs or returns garbage errors)."""
    churn = os.path.join(ROOT, "tests", "workloads", "py_churn.py")
    pys = [DEBIAN_PY] + [os.path.join(PYENV, v, "bin", "python") for v in ("3.9.18", "3.13.0")]
    pys = [interpreter(p) for p in pys if os.access(p, os.X_OK)]
    if not pys:
        raise Skip("no Python 3.9-3.13 interpreter present")
    for py in pys:
        wl = Workload([py, churn])
        try:
            wait_cpu(wl.pid)    # churning
            head, _ = dump(wl.pid)  # a stopped read first: the version
            p = subprocess.run([DUMP, str(wl.pid), "--nostop", "2000"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=120)
            assert p.returncode == 0, (py, p.returncode, p.stderr)
            stats = json.loads(p.stdout.splitlines()[-1])
            assert stats["other"] == 0 and stats["esrch"] == 0 and stats["bad_frames"] == 0, \
                (stats, p.stderr)
            assert stats["ok"] > stats["calls"] // 10, (py, stats)
            print(f"{head['version']} running: {stats}")
        finally:
            wl.kill()


def test_not_permitted():
    """A reader without the rights to the target gets one clear line, no frames."""
    py = interpreter(DEBIAN_PY)
    if not shutil.which("setpriv"):
        raise Skip("setpriv absent")
    wl = Workload([py, HANG])
    try:
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", DUMP,
                            str(wl.pid)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, timeout=60)
        assert p.returncode == 0
        lines = [json.loads(l) for l in p.stdout.splitlines()]
        assert lines == [{"pid": wl.pid, "version": None,
                          "err": f"pid {wl.pid}: cannot read its maps: Permission denied"}], lines
    finally:
        wl.kill()
