"""Tier 2: Python frames (--py-stacks, BPF-captured; bpf/ustack.bpf.h, user/core/ustack.c) in the
flight recorder and the memory tracer, end to end, against CPython's own view of its stack.

- `tptrace fr --py-stacks`: every rank of a simulated NCCL job is Python
  (tests/workloads/py_nccl_coll.py, ctypes into tests/sim's libnccl); each collective entry's
  `frames` must be exactly the stack the workload recorded on the line of that call (function,
  file, line, innermost first, the whole chain), on every interpreter present; with a rank that
  skips the last all_reduce, tptrace-fr's verdict names that rank's last call site and the line
  the others wait in.
- `tptrace mem --py-stacks`: allocations made from known Python lines
  (tests/workloads/py_alloc.py, through the simulated caching allocator's USDT probe): each live
  block's memory_viz `frames` start with exactly those Python frames, then native ones, and
  `--leaks` groups by the innermost Python frame."""
import json
import os
import re
import signal
import time
import subprocess
import sys

from lib import ROOT, SIM_LIB, WL, Skip, Workload, need_root, tmp_path, wait_blocked
from ncclib import FR_TOOL
from lib import Tracer, load_trace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_mem import MemTracer, check_viz_fields, infos  # noqa: E402

PY_COLL = os.path.join(ROOT, "tests", "workloads", "py_nccl_coll.py")
PY_ALLOC = os.path.join(ROOT, "tests", "workloads", "py_alloc.py")
DEBIAN_PY = "/usr/bin/python3"         # 3.11, libpython linked in (always runs)
PYENV = "/root/.pyenv/versions"


def interpreter(path):
    if not os.access(path, os.X_OK):
        raise Skip(f"{path} is not installed on this machine")
    return path


def pyenv(minor):
    """the newest pyenv CPython 3.<minor> present, else a skip saying so"""
    try:
        found = sorted((v for v in os.listdir(PYENV) if re.fullmatch(rf"3\.{minor}\.\d+", v)),
                       key=lambda v: int(v.split(".")[2]))
    except FileNotFoundError:
        found = []
    if not found:
        raise Skip(f"no pyenv CPython 3.{minor} under {PYENV}")
    return interpreter(os.path.join(PYENV, found[-1], "bin", "python"))


def want_frames(calls):
    return [[{"name": f, "filename": file, "line": line} for f, file, line in c] for c in calls]


class PyJob:
    """nranks rank processes of py_nccl_coll.py under one interpreter, recorded by
    `tptrace fr --py-stacks`"""

    def __init__(self, python, nranks, steps, culprit=-1, name="pyfr", all_procs=False,
                 step_gap_ms=0):
        """all_procs: `tptrace fr -a` started first; the ranks are recorded from their exec"""
        self.dir = tmp_path(name)
        subprocess.run(["rm", "-rf", self.dir], check=True)
        os.makedirs(self.dir)
        self.dump_dir = os.path.join(self.dir, "dumps")
        id_file = os.path.join(self.dir, "nccl.id")
        self.expect = [os.path.join(self.dir, f"expect.{r}.json") for r in range(nranks)]
        self.tracer = None
        self.ranks = []
        try:
            if all_procs:
                self.tracer = Tracer(["fr", "-a", "-v", "--py-stacks", "--no-stacks",
                                      "--dump-dir", self.dump_dir], ready=False)
                assert self.tracer.err.wait_for(lambda l: "flight recorder on" in l, 30), \
                    self.tracer.err.text()
            self._start(python, nranks, steps, culprit, id_file, all_procs, step_gap_ms)
        except BaseException:
            self.kill()     # never leave a recorder or a rank behind
            raise

    def _start(self, python, nranks, steps, culprit, id_file, all_procs, step_gap_ms):
        for r in range(nranks):
            self.ranks.append(Workload([python, PY_COLL, "--rank", str(r), "--nranks",
                                        str(nranks), "--id-file", id_file, "--lib-dir",
                                        SIM_LIB, "--steps", str(steps), "--culprit",
                                        str(culprit), "--expect", self.expect[r],
                                        "--step-gap-ms", str(step_gap_ms)],
                                       env={"RANK": str(r), "WORLD_SIZE": str(nranks),
                                            "LOCAL_RANK": str(r)}, wait_ready=False))
        for w in self.ranks:     # they rendezvous in ncclCommInitRank before READY
            w.wait_ready()
        if all_procs:
            return
        args = ["fr", "--py-stacks", "--no-stacks", "--dump-dir", self.dump_dir]
        for w in self.ranks:
            args += ["-p", str(w.pid)]
        self.tracer = Tracer(args, ready=False)
        assert self.tracer.err.wait_for(lambda l: "flight recorder on" in l, 30), \
            self.tracer.err.text()

    def dumps(self):
        """this job's dumps by rank (with -a the recorder may see other NCCL processes)"""
        pids = [w.pid for w in self.ranks]
        out = {}
        for f in os.listdir(self.dump_dir):
            if f.startswith("tptrace-fr.") and f.endswith(".json"):
                with open(os.path.join(self.dump_dir, f)) as fh:
                    d = json.load(fh)
                # a state-first file (stacks pending) is not the complete dump yet
                if d["pid"] in pids and d.get("stacks_pending") is not True:
                    out[d["global_rank"]] = d
        return out

    def calls(self, r):
        with open(self.expect[r]) as f:
            return json.load(f)["calls"]

    def kill(self):
        for w in self.ranks:
            w.kill()
        if self.tracer and self.tracer.p.poll() is None:
            self.tracer.p.kill()
            self.tracer.p.wait()


def check_fr_frames(python, minor, all_procs=False):
    """3 ranks x 3 steps of all_reduce + all_gather: every entry's frames exactly as CPython
    saw them at the call, the dump's Python version named"""
    need_root()
    job = PyJob(python, 3, 3, name=f"pyfr-{minor}{'-a' if all_procs else ''}",
                all_procs=all_procs)
    try:
        if all_procs:
            # -a sets a process up when it maps libnccl, asynchronously: calls made before
            # that carry frames [] ("not captured"); the exact check starts once it is
            for w in job.ranks:
                assert job.tracer.err.wait_for(
                    lambda l, p=w.pid: f"recording pid {p} " in l, 15), job.tracer.err.text()
        for w in job.ranks:
            w.go()
        for w in job.ranks:
            w.wait_done(60)
        # alive until tptrace has read their records: the code objects are read from the
        # process when its entries are recorded (one that exited first gives unresolved
        # frames, never wrong ones). A dump drains the ring first (docs/fr-schema.md
        # "ring_drained"): once each rank's signal dump is written, all was read
        job.tracer.p.send_signal(signal.SIGUSR2)
        assert job.tracer.err.wait_for(
            lambda l: sum(1 for x in job.tracer.err.lines if "(signal)" in x) >= 3, 60), \
            job.tracer.err.text()
        for w in job.ranks:
            assert w.finish() == 0, w.err.text()
        if all_procs:
            for w in job.ranks:
                assert job.tracer.err.wait_for(
                    lambda l, p=w.pid: f"dumped pid {p} (exit)" in l, 15), job.tracer.err.text()
            assert job.tracer.stop() == 0, job.tracer.err.text()
        else:
            assert job.tracer.wait(30) == 0, job.tracer.err.text()
        dumps = job.dumps()
        assert sorted(dumps) == [0, 1, 2], sorted(dumps)
        for r, d in dumps.items():
            assert d["py_stacks"]["python"].startswith(f"3.{minor}."), d["py_stacks"]
            assert d["py_stacks"]["why_no_frames"] is None, d["py_stacks"]
            coll = [e for e in d["entries"] if e["op"] in ("all_reduce", "all_gather")]
            assert [e["op"] for e in coll] == ["all_reduce", "all_gather"] * 3, \
                [e["op"] for e in coll]
            want = want_frames(job.calls(r))
            assert len(want) == 6, want
            for e, w in zip(coll, want):
                assert e["frames"] == w, (r, e["record_id"], e["frames"], w)
                assert "frames_missing" not in e, e
            # the innermost frame is the line of the collective call itself
            assert coll[0]["frames"][0]["name"] == ("Trainer.all_reduce" if minor >= 11
                                                    else "all_reduce"), coll[0]["frames"][0]
            assert coll[0]["frames"][0]["filename"] == PY_COLL
    finally:
        job.kill()


def test_fr_py_frames_debian_3_11():
    check_fr_frames(interpreter(DEBIAN_PY), 11)


def test_fr_py_frames_all_processes():
    """tptrace fr -a --py-stacks: ranks started after the recorder, set up from their exec"""
    check_fr_frames(interpreter(DEBIAN_PY), 11, all_procs=True)


def test_fr_py_frames_pyenv_3_9():
    check_fr_frames(pyenv(9), 9)


def test_fr_py_frames_pyenv_3_10():
    check_fr_frames(pyenv(10), 10)


def test_fr_py_frames_pyenv_3_12():
    check_fr_frames(pyenv(12), 12)


def test_fr_py_frames_pyenv_3_13():
    check_fr_frames(pyenv(13), 13)


def test_fr_py_frames_culprit_in_verdict():
    """rank 1 skips the last all_reduce and waits in Python: tptrace-fr's missing_rank names
    rank 1's last collective call site (the all_gather line of step 1, completed) and the
    line ranks 0 and 2 called the all_reduce they wait in, in --json and in the text"""
    need_root()
    # steps 30 ms apart: the comm was created before attach, so tptrace-fr aligns the ranks'
    # seqs by their order and creation times; with 1 ms steps (the ranks' skew under load) a
    # shift by one step matched as well and CI once read rank 1 as having completed seq 5
    job = PyJob(interpreter(DEBIAN_PY), 3, 3, culprit=1, name="pyfr-culprit", step_gap_ms=30)
    try:
        for w in job.ranks:
            w.go()
        assert job.ranks[1].out.wait_for(lambda l: l.startswith("# culprit waits"), 30)
        for r in (0, 2):
            assert job.ranks[r].out.wait_for(lambda l: l.startswith("# step 2"), 30)
            # in the all_reduce rank 1 never joins: asleep in the sim's wait for good
            wait_blocked(job.ranks[r].pid, job.ranks[r].pid, "futex")
        # a dwell the scenario needs, not a wait for a state: tptrace-fr calls a rank stuck
        # once it waited past 1.0 s at its dump (load only lengthens it)
        time.sleep(1.0)
        job.tracer.p.send_signal(signal.SIGUSR2)
        assert job.tracer.err.wait_for(
            lambda l: sum(1 for x in job.tracer.err.lines if "(signal)" in x) >= 3, 30), \
            job.tracer.err.text()
        assert job.tracer.stop() == 0, job.tracer.err.text()
        p = subprocess.run([FR_TOOL, "--json", job.dump_dir], capture_output=True, text=True,
                           timeout=60)
        out = json.loads(p.stdout)
        v = out["verdicts"][0]
        assert (v["rule"], v["ranks"], v["seq"]) == ("missing_rank", [1], 5), out["verdicts"]
        culprit = want_frames(job.calls(1))
        assert len(culprit) == 4, culprit          # 2 steps x (all_reduce, all_gather)
        py = v["py_frames"]
        assert (py["global_rank"], py["op"], py["collective_seq_id"], py["entry"]) == \
            (1, "all_gather", 4, "newest"), py
        assert py["frames"] == culprit[3][:8], (py["frames"], culprit[3])
        waiting = v["py_frames_waiting"]
        assert waiting["collective_seq_id"] == 5, waiting
        rank = waiting["global_rank"]
        assert rank in (0, 2), waiting
        assert waiting["frames"] == want_frames(job.calls(rank))[4][:8], waiting
        h = subprocess.run([FR_TOOL, job.dump_dir], capture_output=True, text=True, timeout=60)
        top = culprit[3][0]
        assert f"rank 1 last entered all_gather seq 4 (completed), called from:\n" \
               f"      {top['filename']}:{top['line']} {top['name']}\n" in h.stdout, h.stdout
    finally:
        job.kill()


LEAK_PY = re.compile(r"^  (\d+ B|\d+\.\d KiB|\d+\.\d MiB|\d+\.\d\d GiB): (\d+) x "
                     r"(\d+ B|\d+\.\d KiB|\d+\.\d MiB|\d+\.\d\d GiB)  cuda:(\d+)  (\S+)  at (\S+) "
                     r"\((\S+):(\d+)\)$")


def test_mem_py_frames_snapshot_and_leaks():
    """each live block's memory_viz frames: the Python frames of its allocating line first
    (exact, innermost first), then native frames; --leaks groups by Python call site"""
    need_root()
    expect = tmp_path("pyalloc.expect.json")
    snap_path = tmp_path("pyalloc.snap.json")
    for p in (expect, snap_path):
        if os.path.exists(p):
            os.unlink(p)
    wl = Workload([DEBIAN_PY, PY_ALLOC, SIM_LIB, expect])
    try:
        tr = MemTracer(["-p", str(wl.pid), "--py-stacks", "--leaks", "-o", snap_path])
        wl.go()
        wl.wait_done()
        assert tr.stop() == 0, tr.err.text()
        wl.finish()
    finally:
        wl.kill()
    with open(expect) as f:
        calls = want_frames(json.load(f)["calls"])
    blocks = {int(x[1], 16): (int(x[2]), int(x[3])) for x in infos(wl) if x[0] == "malloc"}
    assert len(blocks) == 5, blocks
    snap = json.load(open(snap_path))
    check_viz_fields(snap)
    live = {}
    for s in snap["segments"]:
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                live[b["address"]] = b
    assert sorted(live) == sorted(a for a, (size, _) in blocks.items() if size != 8192), live
    for addr, b in live.items():
        size, k = blocks[addr]
        want = [dict(f, line=f["line"]) for f in calls[k]]
        # memory_viz's key order: filename, line, name
        got_py = b["frames"][:len(want)]
        assert [(f["name"], f["filename"], f["line"]) for f in got_py] == \
            [(f["name"], f["filename"], f["line"]) for f in want], (b["frames"], want)
        assert len(b["frames"]) > len(want) and b["frames"][len(want)]["line"] == 0, \
            f"native frames follow the Python ones: {b['frames']}"
    # the freed 8192 block's alloc event carries its frames too
    scratch = [a for a, (size, _) in blocks.items() if size == 8192][0]
    ev = [e for e in snap["device_traces"][0] if e["addr"] == scratch and e["action"] == "alloc"]
    assert ev and ev[0]["frames"][0]["name"] == calls[4][0]["name"] and \
        ev[0]["frames"][0]["line"] == calls[4][0]["line"], ev

    report = tr.out.text()
    groups = [LEAK_PY.match(l).groups() for l in report.splitlines() if LEAK_PY.match(l)]
    tensor = [g for g in groups if g[4] == "pytorch:malloc"]
    layer, cache = calls[0][0], calls[3][0]
    assert [(t, int(n), s, site, file, int(line))
            for t, n, s, _, _, site, file, line in tensor] == [
        ("2.0 MiB", 1, "2.0 MiB", cache["name"], cache["filename"], cache["line"]),
        ("12.0 KiB", 3, "4.0 KiB", layer["name"], layer["filename"], layer["line"]),
    ], report
    chain = "\n".join(f"      #{i:<2d} {f['filename']}:{f['line']} {f['name']}"
                      for i, f in enumerate(calls[0]))
    assert chain in report, report
    assert "grouped by Python call site" in report, report


def test_trace_mem_events_carry_python_stacks():
    """tptrace -p PID --mem --py-stacks: every allocation's [memory] event in the trace (and
    the allocation call's) carries the stack of its Python line, innermost first"""
    need_root()
    expect = tmp_path("pyalloc-trace.expect.json")
    out = tmp_path("pyalloc-trace.json")
    for p in (expect, out):
        if os.path.exists(p):
            os.unlink(p)
    wl = Workload([DEBIAN_PY, PY_ALLOC, SIM_LIB, expect])
    try:
        tr = Tracer(["-p", str(wl.pid), "--mem", "--py-stacks", "-o", out])
        wl.go()
        wl.wait_done()
        # stopped while the process lives (it holds after DONE): the reader drains the ring
        # and reads the code objects before it exits
        assert tr.stop() == 0, tr.err.text()
        wl.finish()
    finally:
        wl.kill()
    with open(expect) as f:
        calls = json.load(f)["calls"]
    blocks = {int(x[1], 16): int(x[3]) for x in infos(wl) if x[0] == "malloc"}
    assert len(blocks) == 5, blocks
    trace = load_trace(out)
    mem = [e for e in trace["traceEvents"] if e.get("name") == "[memory]" and
           e["args"].get("action") == "alloc" and int(e["args"]["Addr"], 16) in blocks]
    assert len(mem) == 5, mem
    for e in mem:
        func, file, line = calls[blocks[int(e["args"]["Addr"], 16)]][0]
        assert e["args"]["stack"].startswith(f"{os.path.basename(file)}:{line} {func}"), e
    frees = [e for e in trace["traceEvents"] if e.get("name") == "[memory]" and
             e["args"].get("action") == "free"]
    assert frees and all("stack" not in e["args"] for e in frees), frees  # frees: no stack
