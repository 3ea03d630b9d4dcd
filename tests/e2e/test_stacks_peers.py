"""Tier 2: tptrace stacks held against the tools on-call engineers already run on a hung
Python process, py-spy (`py-spy dump --native --json`) and pystack (`pystack remote`), from the
test venv (tests/venv/): the same processes, the same Python frames (function, file, line) on
every thread, for every CPython 3.9-3.13 on the machine and Debian's 3.11, and in a torch 2.x
process with a thread inside a torch op. Places (tests/workloads/py_peers.py): a C extension
(ctypes -> pause()), a lock wait, time.sleep in a generator, torch.futures.Future.wait."""
import json
import os
import re
import subprocess

from lib import (ROOT, TPTRACE, Skip, Workload, need_root, pyenv_python, venv_python)

PEERS = os.path.join(ROOT, "tests", "workloads", "py_peers.py")
DEBIAN_PY = "/usr/bin/python3"


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (argv, p.returncode, p.stderr[-2000:])
    return p.stdout


def tptrace_frames(pid):
    """{tid: [(function, file, line), ...]} innermost first, threads with Python frames."""
    d = json.loads(run([TPTRACE, "stacks", "-p", str(pid), "--json", "--samples", "1"]))
    out = {}
    for t in d["processes"][0]["threads"]:
        py = [(f["func"], f["file"], f["line"]) for f in t["frames"] if f["kind"] == "python"]
        if py:
            out[t["tid"]] = py
    return out


def pyspy_frames(pid):
    py_spy = os.path.join(os.path.dirname(venv_python()), "py-spy")
    d = json.loads(run([py_spy, "dump", "--pid", str(pid), "--native", "--json"]))
    out = {}
    for t in d:
        # --native interleaves native frames (no Python file, line 0)
        py = [(f["name"], f["filename"], f["line"]) for f in t["frames"]
              if f["filename"].endswith(".py")]
        if py:
            out[t["os_thread_id"]] = py
    return out


PYSTACK_THREAD = re.compile(r"^Traceback for thread (\d+) ")
PYSTACK_FRAME = re.compile(r'^\s+\(Python\) File "(.*)", line (\d+), in (\S+)$')


def pystack_frames(pid):
    """pystack prints outermost first and names a function by co_name (no class)."""
    pystack = os.path.join(os.path.dirname(venv_python()), "pystack")
    out, tid = {}, None
    for line in run([pystack, "remote", "--no-color", str(pid)]).splitlines():
        m = PYSTACK_THREAD.match(line)
        if m:
            tid = int(m.group(1))
            out[tid] = []
            continue
        m = PYSTACK_FRAME.match(line)
        if m and tid is not None:
            out[tid].insert(0, (m.group(3), m.group(1), int(m.group(2))))
    return {t: f for t, f in out.items() if f}


def short(frames):
    """co_name for a co_qualname: "Holder.hold" -> "hold", "<module>" stays."""
    return [(f.rsplit(".", 1)[-1] if not f.startswith("<") else f, path, line)
            for f, path, line in frames]


def compare(python, extra=()):
    need_root()
    wl = Workload([python, PEERS] + list(extra), wait_ready=False)
    try:
        wl.wait_ready(120)
        ours = tptrace_frames(wl.pid)
        spy = pyspy_frames(wl.pid)
        pst = pystack_frames(wl.pid)
    finally:
        wl.kill()
    nthreads = 4 if extra else 3
    assert len(ours) == nthreads, ours
    assert set(ours) == set(spy) == set(pst), (sorted(ours), sorted(spy), sorted(pst))
    for tid in ours:
        assert ours[tid] == spy[tid], (python, tid, ours[tid], spy[tid])
        assert short(ours[tid]) == pst[tid], (python, tid, ours[tid], pst[tid])
    # innermost frames: the places the workload blocks in (co_qualname from 3.11 on, so
    # "Holder.hold" there and "hold" before, as CPython itself names them)
    funcs = {short(fr)[0][0] for fr in ours.values()}
    want = {"hold", "take", "ticks"} | ({"wait"} if extra else set())
    assert funcs == want, (python, funcs)


def test_stacks_like_pyspy_pystack_debian():
    compare(DEBIAN_PY)


def make_version_test(minor):
    def test():
        compare(pyenv_python(minor))
    test.__name__ = f"test_stacks_like_pyspy_pystack_3_{minor}"
    test.__doc__ = f"the same frames on pyenv's CPython 3.{minor} (skipped where absent)"
    return test


for _minor in (9, 10, 11, 12, 13):
    globals()[f"test_stacks_like_pyspy_pystack_3_{_minor}"] = make_version_test(_minor)


def test_stacks_like_pyspy_pystack_torch_op():
    """torch 2.x (the venv's CPython): a thread inside a torch op (Future.wait in C++)."""
    compare(venv_python(), ["torch"])
