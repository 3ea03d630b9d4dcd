"""Tier 2: dumps of one moment (issue 22 items 1 and 4, docs/fr-schema.md "dump_set"). A round of
dumps captures every process's state at one instant before the slow parts (stack snapshots,
writing): every dump of the round names the same dump_set, its dump_time_ns is the capture and
comes before the dump's own stack snapshot. A stall dumps every process of the stalled job,
the culprit that has nothing pending too, with or without a job id (with one, through a
trigger file the other hosts answer)."""
import glob
import json
import os
from lib import Skip, Tracer, need_root
from ncclib import Job

NRANKS = 4
CULPRIT = 1
JOB_VARS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_ADDR", "MASTER_PORT")


def all_dumps(job):
    out = []
    for path in sorted(glob.glob(os.path.join(job.dump_dir, "tptrace-fr.*.json"))):
        with open(path) as f:
            d = json.load(f)
        if d.get("stacks_pending") is not True:     # state-first files: not yet complete
            out.append(d)
    return out


def check_one_set(ds, n):
    """n dumps of one round: one id, count n, indices 0..n-1, one capture instant"""
    sets = {d["dump_set"]["id"] for d in ds}
    assert len(sets) == 1 and len(list(sets)[0]) == 16, sets
    assert sorted(d["dump_set"]["index"] for d in ds) == list(range(n)), ds
    assert {d["dump_set"]["count"] for d in ds} == {n}
    cap = {(d["dump_time_ns"], d["dump_mono_ns"], int(d["dump_set"]["captured_ns"]),
            d["dump_set"]["captured_mono_ns"]) for d in ds}
    assert len(cap) == 1, cap
    t, mono, _, _ = cap.pop()
    for d in ds:
        s = d["dump_set"]
        assert s["ring_drained"] is True, s
        # the drain before the capture: a few ms at most on a quiet job
        assert 0 <= s["capture_spread_ns"] < 1e9, s
        for ic in d["in_call"]:
            assert int(ic["entered_ns"]) <= t, (ic, t)
    return t, mono


def test_fr_dumpset_sigint_one_moment():
    """a healthy job stopped with SIGINT while it runs: the final dumps are one set whose
    state was captured before any of their stack snapshots was taken (the snapshots of 3
    samples take ~0.4 s: a dump time after them made a rank that had just entered
    cudaStreamSynchronize look inside it for 0.4 s)"""
    need_root()
    job = Job(NRANKS, "healthy", steps=1000000, name="dumpset-sigint", extra=["--announce"])
    try:
        job.record(["--stall-timeout", "0"])
        job.go()
        # running: every rank is some steps in
        for w in job.ranks:
            assert w.out.wait_for(lambda l: l == "# step 20", 30), w.out.text()[-500:]
        assert job.tracer.p.poll() is None
        assert job.stop() == 0, job.tracer.err.text()
        ds = all_dumps(job)
        assert len(ds) == NRANKS, [d["pid"] for d in ds]
        t, mono = check_one_set(ds, NRANKS)
        for d in ds:
            assert d["dump_reason"] == "final"
            assert d["entries"], d["pid"]
            snaps = [s for s in d["stacks"] if s["taken"] == "dump"]
            assert len(snaps) == 1, d["stacks_error"]
            # state first, then the slow parts
            assert int(snaps[0]["mono_ns"]) > mono, (snaps[0]["mono_ns"], mono)
    finally:
        job.kill()


def stalled_job(name, env, init_after_go=True):
    """idle: rank 1 stops calling NCCL (nothing pending), ranks 0, 2, 3 wait for it in the
    allreduce of step 1; one recorder of all four with a 1 s stall timeout"""
    job = Job(NRANKS, "idle", steps=2, culprit=CULPRIT, name=name, env=env,
              extra=["--init-after-go"] if init_after_go else [])
    job.record(["--stall-timeout", "1", "--stack-samples", "1", "-v"])
    job.go()
    assert job.ranks[CULPRIT].out.wait_for(lambda l: l.startswith("# culprit idle"), 30)
    return job


def test_fr_dumpset_stall_holds_culprit_without_job_id():
    """no job id in the environment and the communicator made before the recorder attached
    (no identity): no trigger is possible, the stall dumps all four ranks as one set, rank 1
    (idle, nothing pending) among them"""
    need_root()
    if any(v in os.environ for v in JOB_VARS):
        raise Skip("a job id variable is set in the test's environment")
    job = stalled_job("dumpset-stall", None, init_after_go=False)
    try:
        tr = job.tracer
        assert tr.err.wait_for(lambda l: sum(1 for x in tr.err.lines
                                             if "dumped pid" in x and "(stall)" in x) >= NRANKS,
                               30), tr.err.text()
        assert not [l for l in tr.err.lines if l.startswith("tptrace: trigger ")], tr.err.text()
        ds = all_dumps(job)
        assert sorted(d["global_rank"] for d in ds) == list(range(NRANKS)), ds
        assert {d["dump_reason"] for d in ds} == {"stall"}
        assert {d["job"] for d in ds} == {None}
        check_one_set(ds, NRANKS)
        culprit = [d for d in ds if d["global_rank"] == CULPRIT][0]
        # the culprit has nothing pending; the others wait in the allreduce
        assert culprit["in_call"] == [], culprit["in_call"]
        assert culprit["pid"] == job.ranks[CULPRIT].pid
        # once per stall: no second round while nothing progresses
        assert not tr.err.wait_for(lambda l: sum(1 for x in tr.err.lines
                                                 if "dumped pid" in x) > NRANKS, 2.5)
    finally:
        job.kill()
        job.stop()


def test_fr_dumpset_stall_with_job_id_writes_trigger():
    """with a job id the stall writes a trigger file (the other hosts of the job answer it)
    and the trigger's round holds all four ranks, the culprit too"""
    need_root()
    job_id = f"dumpset-{os.getpid()}"
    job = stalled_job("dumpset-trig", {"TORCHELASTIC_RUN_ID": job_id})
    try:
        tr = job.tracer
        line = tr.err.wait_for(lambda l: l.startswith("tptrace: trigger ") and " written to " in l, 30)
        assert line and f"for job {job_id} (stall)" in line, tr.err.text()
        tid = line.split()[2]
        assert tr.err.wait_for(lambda l: sum(1 for x in tr.err.lines
                                             if f"(trigger {tid} " in x) >= NRANKS, 30), tr.err.text()
        trig = glob.glob(os.path.join(job.dump_dir, "tptrace-trigger.*.json"))
        assert [os.path.basename(p) for p in trig] == [f"tptrace-trigger.{tid}.json"], trig
        ds = all_dumps(job)
        assert sorted(d["global_rank"] for d in ds) == list(range(NRANKS))
        for d in ds:
            assert d["dump_reason"] == "trigger" and d["trigger"]["id"] == tid, d["trigger"]
            assert d["trigger"]["reason"] == "stall"
        check_one_set(ds, NRANKS)
    finally:
        job.kill()
        job.stop()


def test_fr_dumpset_stall_without_job_id_triggers_other_host():
    """no job id, two recorders (hosts A: ranks 0-1, watching for stalls; B: ranks 2-3, not):
    A's stall writes a trigger for the communicator rank 0 waits on (job
    "nccl-comm:<its id>") and B, whose ranks have that communicator, answers it: the idle
    culprit (rank 3, on B) is dumped for A's stall"""
    need_root()
    if any(v in os.environ for v in JOB_VARS):
        raise Skip("a job id variable is set in the test's environment")
    job = Job(NRANKS, "idle", steps=2, culprit=3, name="dumpset-comm-trig",
              extra=["--init-after-go"])
    tracers = {}
    try:
        for host, ranks, stall in (("hostA", (0, 1), "1"), ("hostB", (2, 3), "0")):
            args = ["fr", "-v", "--dump-dir", job.dump_dir, "--host-id", host,
                    "--stack-samples", "1", "--stall-timeout", stall]
            for r in ranks:
                args += ["-p", str(job.ranks[r].pid)]
            tracers[host] = Tracer(args, ready=False)
        for t in tracers.values():
            assert t.err.wait_for(lambda l: "flight recorder on" in l, 30), t.err.text()
        job.go()
        a, b = tracers["hostA"], tracers["hostB"]
        line = a.err.wait_for(lambda l: l.startswith("tptrace: trigger ") and " written to " in l, 30)
        assert line and " for job nccl-comm:" in line and "(stall)" in line, a.err.text()
        tid = line.split()[2]
        comm_job = line.split(" for job ")[1].split()[0]
        for t in (a, b):
            assert t.err.wait_for(lambda l: sum(1 for x in t.err.lines
                                                if f"(trigger {tid} " in x) >= 2, 30), t.err.text()
        assert any(f"trigger {tid} for job {comm_job} from hostA (stall)" in l for l in b.err.lines)
        ds = all_dumps(job)
        assert sorted(d["global_rank"] for d in ds) == list(range(NRANKS)), ds
        comm_id = comm_job.split(":")[1]
        for d in ds:
            assert d["trigger"]["id"] == tid and d["job"] is None, (d["trigger"], d["job"])
            assert comm_id in [c["comm_id"] for c in d["comms"]], d["comms"]
        # one set per recorder
        for host in tracers:
            check_one_set([d for d in ds if d["host"] == host], 2)
    finally:
        job.kill()
        for t in tracers.values():
            t.stop()
