"""Tier 2: jobs that hung BEFORE tptrace attached (issue 10). Rank processes of a simulated NCCL
job (tests/workloads/nccl_rank.c, --announce) are let go and hang; only then does `tptrace fr`
attach. Their rings stay empty (the calls they hang in were entered before the probes), so the
verdict must come from the stack snapshots the recorder takes at attach and at the dump
(docs/fr-schema.md "Stacks"): the exact rule, ranks, confidence and the culprit's top frames,
by the function names of nccl_rank.c (exported, noinline)."""
import os
from lib import Skip, Tracer, need_root, task_state, wait_until
from ncclib import PY_RANK, Job, analyze

NRANKS = 4
CULPRIT = 1
PY311 = "/usr/bin/python3"    # Debian's: libpython linked statically into the executable


def hung_job(scenario, name, env=None, culprit_line=None, python_rank=None, record=()):
    """a 4-rank job hung at step 0 before tptrace attached; returns (job, verdicts, rc)"""
    need_root()
    job = Job(NRANKS, scenario, steps=3, culprit=CULPRIT, env=env, name=name,
              extra=["--announce", "--fault-step", "0"], python_rank=python_rank)
    try:
        job.go_and_hang(CULPRIT, culprit_line)
        job.record(list(record))
        job.dump_now()
        assert job.stop() == 0, job.tracer.err.text()
        for w in job.ranks:
            assert w.p.poll() is None, "the ranks hang: none exits"
    finally:
        job.kill()
    rc, out, err = analyze(job.dump_dir)
    assert rc == 1, (rc, out, err)
    return job, out["verdicts"]


def keys(verdicts):
    return [(v["rule"], v["ranks"], v["comm"], v["seq"], v["confidence"],
             v.get("confidence_reason")) for v in verdicts]


def funcs(stack, n):
    return [f["func"] for f in stack[:n]]


def check_empty_rings(job):
    """what makes these jobs hard: tptrace saw no collective, every dump has both snapshots"""
    dumps = job.dumps()
    assert sorted(dumps) == list(range(NRANKS)), sorted(dumps)
    for r, d in dumps.items():
        assert d["version"] == 2, d["version"]
        assert d["entries"] == [] and d["comms"] == [], (r, d["entries"][:2], d["comms"])
        assert [s["taken"] for s in d["stacks"]] == ["attach", "dump"], d["stacks_error"]
        assert d["stacks_error"] is None
        for s in d["stacks"]:
            assert s["samples"] == 3 and s["ptrace_error"] is None, s
            assert sum(t["issuing"] for t in s["threads"]) == 1
    return dumps


STACKS_ONLY = ("medium", "from stacks only")


def test_fr_hang_missing_rank():
    """rank 1 stopped calling NCCL (sleeps in culprit_idle); 0,2,3 wait for it in step_sync's
    cudaStreamSynchronize (the sim's collectives complete on the stream)"""
    job, v = hung_job("idle", "hang-idle", culprit_line="# culprit idle")
    check_empty_rings(job)
    assert keys(v) == [("odd_stack", [1], None, None) + STACKS_ONLY,
                       ("attached_after_hang", [0, 2, 3], None, None, "high", None)], keys(v)
    assert v[0]["op"] == "cudaStreamSynchronize"
    assert funcs(v[0]["stack"], 3) == ["clock_nanosleep", "culprit_idle", "main"], v[0]["stack"]
    assert v[0]["stack"][1]["module"].endswith("/nccl_rank")
    assert "is not where 3 of 4 ranks wait: inside cudaStreamSynchronize from step_sync " \
           "(nccl_rank+0x" in v[0]["detail"], v[0]["detail"]
    assert "is idle in a wait outside NCCL/CUDA, no progress over 3 samples; native frames: " \
           "clock_nanosleep (libc.so.6+0x" in v[0]["detail"], v[0]["detail"]
    assert v[1]["stack"] is None


def test_fr_hang_stuck_sync():
    """rank 1 is inside cudaStreamSynchronize on a kernel that never ends (stuck_sync); the
    others are in the same API, reached from step_sync: another wait, by its call path"""
    job, v = hung_job("stuck", "hang-stuck")
    check_empty_rings(job)
    assert keys(v) == [("odd_stack", [1], None, None) + STACKS_ONLY,
                       ("attached_after_hang", [0, 1, 2, 3], None, None, "high", None)], keys(v)
    st = funcs(v[0]["stack"], 8)
    i = st.index("cudaStreamSynchronize")
    assert st[i + 1:i + 3] == ["stuck_sync", "main"], st
    assert "rank 1: thread \"nccl_rank\"" in v[0]["detail"] and \
           "is inside cudaStreamSynchronize, no progress over 3 samples" in v[0]["detail"]


def test_fr_hang_no_progress():
    """every rank entered the step's collectives, which never complete (TPSIM_NCCL_US: one
    hour each): all inside cudaStreamSynchronize from step_sync, no progress"""
    job, v = hung_job("healthy", "hang-never", env={"TPSIM_NCCL_US": "3600000000"})
    check_empty_rings(job)
    assert keys(v) == [("no_progress", [0, 1, 2, 3], None, None) + STACKS_ONLY,
                       ("attached_after_hang", [0, 1, 2, 3], None, None, "high", None)], keys(v)
    assert v[0]["op"] == "cudaStreamSynchronize"
    st = funcs(v[0]["stack"], 8)
    i = st.index("cudaStreamSynchronize")
    assert st[i + 1:i + 3] == ["step_sync", "main"], st
    assert v[0]["detail"].startswith("ranks 0-3 are all inside cudaStreamSynchronize and none "
                                     "progressed over 3 samples: a hang inside NCCL or the "
                                     "network"), v[0]["detail"]


def test_fr_hang_spin_native():
    """rank 1 spins on the CPU (culprit_spin): progressing, but not in the others' wait"""
    job, v = hung_job("spin", "hang-spin", culprit_line="# culprit spin")
    check_empty_rings(job)
    assert keys(v) == [("odd_stack", [1], None, None) + STACKS_ONLY,
                       ("attached_after_hang", [0, 2, 3], None, None, "high", None)], keys(v)
    assert funcs(v[0]["stack"], 2) == ["culprit_spin", "main"], v[0]["stack"]
    # a two-instruction loop may show the same pc in every sample: progress either way
    assert "is running native code outside NCCL/CUDA, " in v[0]["detail"], v[0]["detail"]


def test_fr_hang_spin_python():
    """rank 1 is a CPython process (ctypes into the simulated libnccl) spinning in Python code
    after its comm init: its Python frame (function, file, line) names it"""
    if not os.access(PY311, os.X_OK):
        raise Skip(f"{PY311} is absent")
    with open(PY_RANK) as f:
        lines = [i for i, l in enumerate(f, 1) if "# AT:spin" in l]     # the loop's two lines
    job, v = hung_job("healthy", "hang-py", culprit_line="# culprit spin",
                      python_rank=(CULPRIT, PY311))
    check_empty_rings(job)
    assert keys(v) == [("odd_stack", [1], None, None) + STACKS_ONLY,
                       ("attached_after_hang", [0, 2, 3], None, None, "high", None)], keys(v)
    py = [f for f in v[0]["stack"] if f["kind"] == "python"]
    assert py and (py[0]["func"], py[0]["file"]) == ("spin", PY_RANK) and \
        py[0]["line"] in lines, (py, lines)
    assert py[1]["func"] == "main" and py[1]["file"] == PY_RANK, py
    assert f"Python frames: spin ({PY_RANK}:{py[0]['line']}) < main ({PY_RANK}:" in \
        v[0]["detail"], v[0]["detail"]


def test_fr_hang_no_stacks():
    """--no-stacks: the same hung job gives no verdict, and the report does not call it
    healthy"""
    need_root()
    job = Job(NRANKS, "idle", steps=3, culprit=CULPRIT, name="hang-nostacks",
              extra=["--announce", "--fault-step", "0"])
    try:
        job.go_and_hang(CULPRIT, "# culprit idle")
        job.record(["--no-stacks"])
        job.dump_now()
        assert job.stop() == 0
    finally:
        job.kill()
    for d in job.dumps().values():
        assert d["stacks"] == [] and d["stacks_error"] == "disabled (--no-stacks)", d
    import subprocess
    from ncclib import FR_TOOL
    p = subprocess.run([FR_TOOL, job.dump_dir], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("nothing to judge: 4 ranks, no "
                                                     "collectives recorded"), p.stdout


def test_fr_hang_attach_snapshot_does_not_delay():
    """the attach snapshots (3 samples, 200 ms apart) run beside the recording: 'flight
    recorder on' comes before any of them is done, and the calls made while they sample are
    recorded"""
    need_root()
    job = Job(NRANKS, "healthy", steps=200, culprit=CULPRIT, name="hang-delay")
    try:
        job.record(["-v"])
        lines = job.tracer.err.lines
        assert not any("attach snapshot in" in l for l in lines[:lines.index(next(
            l for l in lines if "flight recorder on" in l))]), lines
        job.go()
        assert job.tracer.err.wait_for(
            lambda l: sum("attach snapshot in" in x for x in job.tracer.err.lines) >= NRANKS, 20)
        job.wait_done(timeout=120)
        assert job.stop() == 0
    finally:
        job.kill()
    for d in job.dumps().values():
        snap = d["stacks"][0]
        assert snap["taken"] == "attach" and snap["samples"] == 3
        # recorded while its attach snapshot sampled (3 samples over 400 ms)
        window = [e for e in d["entries"]
                  if snap["time_ns"] <= e["time_created_ns"] <= snap["time_ns"] + 400000000]
        assert window, (snap["time_ns"], d["entries"][:1])
        assert d["stacks_error"] == "the process exited: only the snapshot at attach"


def test_fr_hang_stack_options_bad_input():
    """--stack-samples / --stack-interval out of range: one clear line, exit 2"""
    import subprocess
    from lib import TPTRACE
    for args, want in ((["--stack-samples", "0"], "invalid --stack-samples '0' (1..100)"),
                       (["--stack-samples", "x"], "invalid --stack-samples 'x' (1..100)"),
                       (["--stack-interval", "0"], "invalid --stack-interval '0' (1..10000 ms)")):
        p = subprocess.run([TPTRACE, "fr", "-p", "1"] + args, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and want in p.stderr.splitlines()[0], (args, p.stderr)


def test_fr_hang_attach_snapshots_in_parallel():
    """the attach snapshots of the 4 ranks are taken together, not one after the other: with
    every sample held (TPTRACE_TEST_SNAPSHOT_HOLD_MS, the threads stay stopped while it
    holds), all 4 ranks are seen stopped at once. One after the other, at most one is."""
    need_root()
    job = Job(NRANKS, "healthy", steps=2, culprit=CULPRIT, name="hang-parallel")
    tracer = None
    try:
        args = ["fr", "--dump-dir", job.dump_dir, "--stack-samples", "1"]
        for p in job.pids():
            args += ["-p", str(p)]
        tracer = Tracer(args, ready=False, env={"TPTRACE_TEST_SNAPSHOT_HOLD_MS": "600000"})
        assert tracer.err.wait_for(lambda l: "flight recorder on" in l, 30), tracer.err.text()
        wait_until(lambda: all(task_state(p) == "t" for p in job.pids()), 60,
                   "all 4 ranks stopped by their attach snapshots at once")
    finally:
        if tracer:
            tracer.p.kill()     # the kernel detaches the held threads (test_stacks kill9)
            tracer.wait(30)
        job.kill()
