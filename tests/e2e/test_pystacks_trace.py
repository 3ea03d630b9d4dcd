"""Tier 2: `tptrace -p PID --py-stacks` on real CPython processes (Debian's 3.11 always, pyenv's
3.9-3.13 where present, each missing one a skip with its reason).

tests/workloads/py_stacks.py calls cudaStreamSynchronize(K) through ctypes from nested
functions, a method, a lambda, a generator, three Python threads and a thread started in C,
each call with its own stream value K; right before each call, on the same line, it writes down
the Python stack as CPython itself sees it (innermost first: func, file, line, firstlineno).
In the trace, the call whose stream arg is K must then carry:
  - a "stack" arg whose innermost frame is exactly that call's file:line and function;
  - python_function slices on its thread that cover it, one per frame of its stack, named as
    torch.profiler names them ("<file>(<firstlineno>): <func>"), chained outermost to innermost
    by "Python parent id";
and the thread started in C: stack "<no Python thread state>", no slice. Every thread's slices
nest (Perfetto draws nothing else). The metadata holds the interpreter's version and the stack
counters; without --py-stacks nothing of this is written."""
import json
import os
import subprocess

from lib import (CUDA_LIB, E2E_BIN, ROOT, SIM_LIB, Skip, Tracer, Workload, check_valid_trace,
                 fresh_tmp_path, load_trace, need_root, pyenv_python, tmp_path, trace_workload)

PY_STACKS = os.path.join(ROOT, "tests", "workloads", "py_stacks.py")
REAL_CUDART = os.path.join(CUDA_LIB, "libcudart.so.13")
SIM_CUDART = os.path.join(SIM_LIB, "libcudart.so.13")
DEBIAN_PY = "/usr/bin/python3"
EPS = 0.0005  # µs: trace times are ns written with 3 decimals
KNOB = "TPTRACE_TEST_COUNTERS_UNREADABLE"


def version_of(python):
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def run(python, lib, name, tracer_args=("--py-stacks",), scenarios=(), tracer_env=None):
    need_root()
    if not os.path.exists(lib):
        raise Skip(f"{lib} absent")
    expect, out = tmp_path(name + ".expect.json"), fresh_tmp_path(name + ".json")
    wl = Workload([python, PY_STACKS, lib, expect, *scenarios])
    try:
        tr = Tracer(["-p", str(wl.pid), "-o", out, *tracer_args], env=tracer_env)
        wl.go()
        wl.wait_done(60)
        # code objects are read from the live process: it holds after DONE while the tracer
        # is stopped, which drains the ring before it exits (a process gone before that
        # leaves its last calls' frames unresolved, as the unit test checks)
        rc = tr.stop()
        assert rc == 0, f"tptrace rc={rc}: {tr.err.text()}"
        wl.finish()
    finally:
        wl.kill()
    with open(expect) as f:
        exp = json.load(f)
    return load_trace(out), wl, tr, exp


def slices(trace, pid):
    return [e for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") == "python_function" and e["pid"] == pid]


def syncs(trace, pid):
    """{stream value: event} of the workload's cudaStreamSynchronize calls (the handle in hex)."""
    return {int(e["args"]["stream"], 16): e for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("name") == "cudaStreamSynchronize" and e["pid"] == pid}


def covers(outer, inner):
    return (outer["ts"] <= inner["ts"] + EPS and
            inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS)


def chain(trace, pid, ev):
    """The python_function slices covering ev on its thread, outermost first, checked to form
    one parent chain."""
    cov = [s for s in slices(trace, pid) if s["tid"] == ev["tid"] and covers(s, ev)]
    by_id = {s["args"]["Python id"]: s for s in cov}
    assert len(by_id) == len(cov), f"duplicate Python ids: {cov}"
    parents = {s["args"].get("Python parent id") for s in cov}
    inner = [s for s in cov if s["args"]["Python id"] not in parents]
    if not cov:
        return []
    assert len(inner) == 1, f"the slices over {ev['name']} at {ev['ts']} are not one chain: {cov}"
    out, s = [], inner[0]
    while s is not None:
        out.append(s)
        parent = s["args"].get("Python parent id")
        assert parent is None or parent in by_id, \
            f"{s['name']}: parent {parent} does not cover the call"
        s = by_id.get(parent)
    assert len(out) == len(cov), f"slices over the call outside its chain: {cov}"
    return out[::-1]


def check_nesting(trace, pid):
    """Every two X slices of a thread are disjoint or nested."""
    threads = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e["pid"] == pid:
            threads.setdefault(e["tid"], []).append(e)
    for tid, evs in threads.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ = []
        for e in evs:
            while open_ and open_[-1]["ts"] + open_[-1]["dur"] <= e["ts"] + EPS:
                open_.pop()
            if open_:
                assert covers(open_[-1], e), \
                    f"tid {tid}: {e['name']} at {e['ts']} overlaps {open_[-1]['name']} " \
                    f"[{open_[-1]['ts']}, +{open_[-1]['dur']}] without nesting"
            open_.append(e)


def check_trace(trace, wl, exp, python):
    check_valid_trace(trace)
    pid = wl.pid
    by_stream = syncs(trace, pid)
    calls = exp["calls"]
    assert calls, "the workload marked no calls"
    tids = set()
    for k, frames in calls.items():
        ev = by_stream.get(int(k))
        assert ev is not None, f"no cudaStreamSynchronize({k}) in the trace"
        func, path, line, _ = frames[0]
        stack = ev["args"].get("stack", "")
        # the innermost frame is the exact line of the call
        assert stack.startswith(f"{os.path.basename(path)}:{line} {func}"), \
            f"call {k}: stack {stack!r}, want {path}:{line} {func} first"
        got = [s["name"] for s in chain(trace, pid, ev)]
        want = [f"{f}({first}): {fn}" for fn, f, _, first in reversed(frames)]
        assert got == want, f"call {k}: slices\n{got}\nwant\n{want}"
        tids.add(ev["tid"])
    assert len(tids) >= 4, f"main thread and three workers: {tids}"
    for k in exp["cthread"]:
        ev = by_stream.get(k)
        assert ev is not None, f"no cudaStreamSynchronize({k}) from the C thread"
        assert ev["args"].get("stack") == "<no Python thread state>", ev
        assert ev["tid"] not in tids and not chain(trace, pid, ev), ev
        assert not [s for s in slices(trace, pid) if s["tid"] == ev["tid"]], "slices on it"
    check_nesting(trace, pid)
    meta = trace["tptrace"]
    target = meta["targets"][0]
    assert target["python"] == version_of(python), target
    assert "python_frames_missing" not in target, target
    ps = meta["python_stacks"]
    # captured: calls given a stack id; a thread without Python gets a status, counted nopy
    assert ps["captured"] >= len(calls) and ps["nopy"] >= len(exp["cthread"]), ps
    assert ps["lost"] == 0 and ps["new"] >= 1, ps
    assert ps["calls_with_stack"] >= len(calls), ps
    assert ps["python_function_slices"] == len(slices(trace, pid)), ps
    assert ps["native_frames"] is False, ps


def test_debian_python311_real_cudart():
    if not os.access(DEBIAN_PY, os.X_OK):
        raise AssertionError(f"{DEBIAN_PY} absent: the 3.11 run must always happen")
    trace, wl, tr, exp = run(DEBIAN_PY, REAL_CUDART, "pystacks-deb311")
    check_trace(trace, wl, exp, DEBIAN_PY)


def test_debian_python311_sim_cudart():
    trace, wl, tr, exp = run(DEBIAN_PY, SIM_CUDART, "pystacks-deb311-sim")
    check_trace(trace, wl, exp, DEBIAN_PY)


def _pyenv(minor):
    python = pyenv_python(minor)
    trace, wl, tr, exp = run(python, REAL_CUDART, f"pystacks-py3{minor}")
    check_trace(trace, wl, exp, python)


def test_pyenv_python39():
    _pyenv(9)


def test_pyenv_python310():
    _pyenv(10)


def test_pyenv_python311():
    _pyenv(11)


def test_pyenv_python312():
    _pyenv(12)


def test_pyenv_python313():
    _pyenv(13)


def test_native_stacks():
    """--native-stacks implies --py-stacks and adds native frames after " | "."""
    trace, wl, tr, exp = run(DEBIAN_PY, REAL_CUDART, "pystacks-native",
                             tracer_args=("--native-stacks",), scenarios=("nested",))
    ps = trace["tptrace"]["python_stacks"]
    assert ps["native_frames"] is True, ps
    for k, frames in exp["calls"].items():
        ev = syncs(trace, wl.pid)[int(k)]
        func, path, line, _ = frames[0]
        stack = ev["args"]["stack"]
        assert stack.startswith(f"{os.path.basename(path)}:{line} {func}"), stack
        assert " | " in stack, f"no native frames: {stack!r}"
        assert chain(trace, wl.pid, ev), "python_function slices as with --py-stacks"


def test_without_flag_nothing_changes():
    trace, wl, tr, exp = run(DEBIAN_PY, REAL_CUDART, "pystacks-off", tracer_args=(),
                             scenarios=("nested", "threads"))
    check_valid_trace(trace)
    evs = syncs(trace, wl.pid)
    for k in exp["calls"]:
        assert int(k) in evs, k
        assert "stack" not in evs[int(k)]["args"], evs[int(k)]
    assert not slices(trace, wl.pid)
    assert "python_stacks" not in trace["tptrace"]
    assert "python" not in trace["tptrace"]["targets"][0]


def test_counters_unknown():
    """A stack counter that cannot be read is written null with the reason, never 0."""
    trace, wl, tr, exp = run(DEBIAN_PY, REAL_CUDART, "pystacks-unknown", scenarios=("nested",),
                             tracer_env={KNOB: "1"})
    ps = trace["tptrace"]["python_stacks"]
    for key in ("captured", "new", "lost", "nopy"):
        assert ps[key] is None, (key, ps)
        assert ps[key + "_unknown"] == "Bad file descriptor", ps
    # the stacks themselves are there: only the counts are unknown
    k, frames = next(iter(exp["calls"].items()))
    assert chain(trace, wl.pid, syncs(trace, wl.pid)[int(k)]), "slices written"


def test_process_without_python():
    """A process without CPython is traced as without --py-stacks (no stack args, no slices),
    the reason in the metadata and in one notice line."""
    need_root()
    trace, wl, tr = trace_workload([os.path.join(E2E_BIN, "api_calls_real")],
                                   tracer_args=["--py-stacks"], out_name="pystacks-nopy.json")
    check_valid_trace(trace)
    target = trace["tptrace"]["targets"][0]
    assert target["python"] is None and target["python_frames_missing"], target
    assert target["python_frames_missing"] in tr.err.text(), tr.err.text()
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == wl.pid]
    assert evs and not slices(trace, wl.pid)
    for e in evs:
        assert "stack" not in e["args"], e
