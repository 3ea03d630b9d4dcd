"""Tier 2: the flight recorder end to end. Rank processes of a simulated NCCL job
(tests/workloads/nccl_rank.c: real rendezvous across processes, collectives that complete
only when every rank reached them) run one fault scenario each; `tptrace fr` records them
from outside; `tptrace-fr` must name the exact culprit."""
import os
import signal
import subprocess
import time
from lib import fresh_tmp_path, need_root, wait_until
from ncclib import Job, analyze

# scenarios whose ranks finish by themselves (culprit rank 1 misbehaves at the last step):
# the first verdict's (rule, ranks, seq) on the world comm. With 3 steps the last step's
# collectives are seqs 7 (all_reduce), 8 (all_gather), 9 (broadcast); p2p seqs count a comm's
# sends and recvs together, so the last step's send is p2p seq 5.
COMPLETING = {
    "healthy": None,
    "size": ("size_mismatch", [1], 7),
    "dtype": ("dtype_mismatch", [1], 7),
    "op": ("op_mismatch", [1], 7),
    "root": ("root_mismatch", [1], 9),
    # rank 1 sends 128 elements where rank 2 posts a 256-element recv: the pair is named
    "p2p": ("p2p_mismatch", [1, 2], 5),
    # late before call 1 of steps 0, 2 and 4 of 6 (one stall makes the step's 3 collectives
    # late: seqs 1-3, 7-9, 13-15), the job going on: a rank that stalls again and again
    "late": ("late_arrival", [1], 1),
}
EXTRA = {"late": (6, ["--fault-step", "4", "--fault-every", "2", "--late-ms", "2000"])}


def run_completing(scenario, nranks=4, extra=(), steps=3):
    need_root()
    job = Job(nranks, scenario, steps=steps, extra=["--init-after-go"] + list(extra),
              name=scenario)
    try:
        job.record()
        job.run_clean()
    finally:
        job.kill()
    return job


def run_hanging(scenario, nranks=4, dwell=0.0, extra=(), alive=None):
    """the job hangs (wait_hung: every live rank blocked on its peers); dwell: seconds the hang
    must last before the dump (a lower bound the scenario needs, e.g. --stuck-ms)"""
    need_root()
    job = Job(nranks, scenario, steps=3, extra=["--init-after-go"] + list(extra), name=scenario)
    try:
        job.record()
        job.go()
        if alive is not None:   # the dead rank first: the others then block for good
            wait_until(lambda: sum(w.p.poll() is None for w in job.ranks) == alive, 60,
                       f"{nranks - alive} rank(s) to die")
        job.wait_hung()
        time.sleep(dwell)
        job.tracer.p.send_signal(signal.SIGUSR2)
        want = alive if alive is not None else nranks
        ok = job.tracer.err.wait_for(
            lambda l: sum(1 for x in job.tracer.err.lines if "(signal)" in x) >= want, 120)
        assert ok, job.tracer.err.text()
        for w in job.ranks:
            assert w.p.poll() is None or scenario in ("exit", "kill"), "ranks hang, not exit"
        assert job.stop() == 0
    finally:
        job.kill()
    return job


def verdicts(job, *args):
    rc, out, err = analyze(job.dump_dir) if not args else analyze_args(job.dump_dir, args)
    return rc, out


def analyze_args(d, args):
    import json
    import subprocess
    from ncclib import FR_TOOL
    p = subprocess.run([FR_TOOL, "--json"] + list(args) + [d], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, json.loads(p.stdout), p.stderr


def first(out):
    """the first verdict as (rule, ranks, comm, seq)"""
    v = out["verdicts"]
    assert v, "expected a verdict"
    return v[0]["rule"], v[0]["ranks"], v[0]["comm"], v[0]["seq"]


def world_id(dumps):
    ids = {c["comm_id"] for d in dumps.values() for c in d["comms"]
           if c["created_by"] == "ncclCommInitRank"}
    assert len(ids) == 1, ids
    return ids.pop()


def check_dumps_complete(job, nranks):
    dumps = job.dumps()
    assert sorted(dumps) == list(range(nranks)), sorted(dumps)
    for r, d in dumps.items():
        assert d["schema"] == "tptrace-fr" and d["version"] == 2
        world = [c for c in d["comms"] if c["created_by"] == "ncclCommInitRank"]
        assert len(world) == 1, d["comms"]
        c = world[0]
        assert c["rank"] == r and c["nranks"] == nranks and c["cross_rank_id"] is True
        assert c["learned"] == {"comm_id": "init_call", "rank": "init_call",
                                "nranks": "init_call", "seq_origin": "comm_init"}
    ids = {tuple(sorted(c["comm_id"] for c in d["comms"] if c["created_by"] == "ncclCommInitRank"))
           for d in dumps.values()}
    assert len(ids) == 1, f"one world comm id on every rank: {ids}"
    return dumps


def test_fr_healthy_exact_entries():
    job = run_completing("healthy")
    dumps = check_dumps_complete(job, 4)
    for r, d in dumps.items():
        assert d["dump_reason"] == "exit" and d["process"] == {"state": "exited", "exit_code": 0, "signal": None}
        e = d["entries"]
        # per step: allreduce, allgather, broadcast, send, recv (3 steps)
        assert [x["op"] for x in e] == ["all_reduce", "all_gather", "broadcast", "send", "recv"] * 3
        assert [x["collective_seq_id"] for x in e if not x["is_p2p"]] == list(range(1, 10))
        assert [x["p2p_seq_id"] for x in e if x["is_p2p"]] == list(range(1, 7))
        assert all(x["state"] == "completed" and x["rc"] == 0 for x in e), [x["state"] for x in e]
        ar = e[0]
        assert (ar["count"], ar["dtype"], ar["reduce_op"], ar["input_sizes"], ar["output_sizes"]) == \
            (1048576, "float32", "sum", [[1048576]], [[1048576]])
        ag = e[1]
        assert (ag["count"], ag["input_sizes"], ag["output_sizes"]) == (4096, [[4096]], [[4096 * 4]])
        bc = e[2]
        assert (bc["root"], bc["dtype"], bc["reduce_op"]) == (0, "int32", None)
        send, recv = e[3], e[4]
        assert send["peer"] == (r + 1) % 4 and recv["peer"] == (r + 3) % 4
        assert send["group_id"] == recv["group_id"] != 0 and e[0]["group_id"] == 0
        assert send["profiling_name"] == f"nccl:send {r}->{(r + 1) % 4}"
        assert all(x["time_discovered_completed_ns"] >= x["time_created_ns"] for x in e)
        assert d["in_call"] == []
    rc, out = verdicts(job)
    assert rc == 0 and out["verdicts"] == [], out


def test_fr_mismatches_and_late():
    for scenario, want in COMPLETING.items():
        if scenario == "healthy":
            continue
        steps, extra = EXTRA.get(scenario, (3, ()))
        job = run_completing(scenario, extra=extra, steps=steps)
        world = world_id(check_dumps_complete(job, 4))
        rc, out = verdicts(job)
        assert rc == 1, (scenario, out)
        rule, ranks, seq = want
        assert first(out) == (rule, ranks, world, seq), (scenario, out["verdicts"])
        if scenario == "late":
            assert "late on 3 separate occasions" in out["verdicts"][0]["detail"], out


def test_fr_late_once_is_history():
    """rank 1 stalls 3 s once, before step 1 of 3 (its seqs 4-6 late), every rank completes
    them and the job runs on to its end: a stall, not a fault of the job (no verdict, exit
    0); said in a note"""
    job = run_completing("late", extra=["--fault-step", "1"])
    world = world_id(check_dumps_complete(job, 4))
    rc, out = verdicts(job)
    assert rc == 0 and out["verdicts"] == [], out["verdicts"]
    notes = [n for n in out["input_notes"] if n.startswith(f"comm {world[:8]}: rank 1 ")]
    assert len(notes) == 1 and "entered all_reduce seq 4 " in notes[0] and \
        "no rank blamed" in notes[0], out["input_notes"]


def test_fr_skipped_collective_hangs():
    job = run_hanging("skip")
    dumps = check_dumps_complete(job, 4)
    # the others are blocked in their step-end sync, inside the call
    for r in (0, 2, 3):
        assert any(c["api"] == "cudaStreamSynchronize" for c in dumps[r]["in_call"]), dumps[r]["in_call"]
    rc, out = verdicts(job)
    assert rc == 1
    # the culprit's all_gather and broadcast took seqs 7 and 8: the others wait in seq 9,
    # which it never entered (the kind mismatch at 7 is listed after it)
    assert first(out) == ("missing_rank", [1], world_id(dumps), 9), out["verdicts"]


def test_fr_rank_stuck_in_host_call():
    job = run_hanging("stuck", dwell=0.6)   # --stuck-ms 500 below: in the call that long
    dumps = check_dumps_complete(job, 4)
    assert [c["api"] for c in dumps[1]["in_call"]] == ["cudaStreamSynchronize"], dumps[1]["in_call"]
    rc, out = analyze_args(job.dump_dir, ["--stuck-ms", "500"])[:2]
    assert first(out) == ("missing_rank", [1], world_id(dumps), 7), out["verdicts"]
    # everyone ends up blocked in a sync; the culprit's is the one that never gets its work
    # (under load another call can pass the 0.5 s too, e.g. a starved watchdog's
    # cudaEventQuery: a verdict of its own, listed first; the sync's is the one asserted)
    stuck = [v for v in out["verdicts"] if v["rule"] == "stuck_in_call" and
             v["op"] == "cudaStreamSynchronize"]
    assert len(stuck) == 1 and 1 in stuck[0]["ranks"], out["verdicts"]


def test_fr_rank_killed():
    job = run_hanging("kill", alive=3)
    dumps = job.dumps()
    assert dumps[1]["process"]["state"] == "killed" and dumps[1]["process"]["signal"] == 9
    assert dumps[1]["dump_reason"] == "exit"
    rc, out = verdicts(job)
    assert first(out) == ("dead_rank", [1], world_id(dumps), 7), out["verdicts"]


def tracer_pid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int([l for l in f if l.startswith("TracerPid:")][0].split()[1])
    except (OSError, IndexError):
        return 0


def test_fr_rank_killed_while_the_recorder_holds_it():
    """A rank killed (kill -9, a scheduler ending the job) while the recorder holds its main
    thread stopped (asking NCCL about a communicator made before attach) is let go of at
    once: its parent can reap it while the recorder keeps running for the others, and its
    dump says killed. A traced thread that dies is a zombie only its tracer can reap: left
    so, torchrun would wait for the rank as long as the recorder runs."""
    need_root()
    hold = fresh_tmp_path("fr-inject-hold")
    job = Job(2, "late", steps=2, culprit=1, extra=["--fault-step", "0", "--late-ms", "60000"],
              name="kill-held")
    try:
        open(hold, "w").close()
        job.record(["--no-stacks", "-v"], env={"TPTRACE_TEST_INJECT_HOLD_WHILE": hold})
        job.go()
        tp = job.tracer.p.pid
        held = wait_until(lambda: [r for r, p in enumerate(job.pids()) if tracer_pid(p) == tp],
                          what="the recorder holding a rank's main thread")[0]
        w = job.ranks[held]
        os.kill(w.pid, signal.SIGKILL)
        os.unlink(hold)
        try:
            rc = w.p.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rank {held} killed while held: not reapable 60 s later "
                                 f"(TracerPid {tracer_pid(w.pid)}, recorder {tp})")
        assert rc == -signal.SIGKILL, rc
        other = job.ranks[1 - held]
        assert other.p.poll() is None and job.tracer.p.poll() is None
        other.kill()
        assert job.tracer.wait(120) == 0, job.tracer.err.text()
    finally:
        if os.path.exists(hold):
            os.unlink(hold)
        # the recorder first: a rank it failed to let go of is released when it exits
        if job.tracer:
            job.tracer.stop()
        job.kill()
    d = job.dumps()[held]
    assert d["process"]["state"] == "killed" and d["process"]["signal"] == 9, d["process"]


def test_fr_rank_exited():
    job = run_hanging("exit", alive=3)
    dumps = job.dumps()
    assert dumps[1]["process"] == {"state": "exited", "exit_code": 3, "signal": None}
    rc, out = verdicts(job)
    assert first(out) == ("dead_rank", [1], world_id(dumps), 7), out["verdicts"]


def test_fr_async_error():
    need_root()
    job = Job(4, "async_error", steps=3, extra=["--init-after-go"], name="async")
    try:
        job.record()
        job.go()
        job.wait_done(ranks=[0, 2, 3])
        for w in job.ranks:
            w.finish()
        assert job.ranks[1].p.returncode == 4
        assert job.tracer.wait(30) == 0
    finally:
        job.kill()
    dumps = job.dumps()
    world = [c for c in dumps[1]["comms"] if c["created_by"] == "ncclCommInitRank"][0]
    assert world["async_error"] == 6 and world["state"] == "aborted", world
    rc, out = verdicts(job)
    rules = [(v["rule"], v["ranks"], v["comm"], v["seq"]) for v in out["verdicts"]]
    assert ("nccl_async_error", [1], world["comm_id"], None) in rules, rules


def test_fr_split_comms():
    job = run_completing("healthy", extra=["--split"])
    dumps = job.dumps()
    for r, d in dumps.items():
        child = [c for c in d["comms"] if c["created_by"] == "ncclCommSplit"]
        assert len(child) == 1
        c = child[0]
        assert c["split_color"] == r % 2 and c["split_key"] == r and c["cross_rank_id"] is True
        world = [x for x in d["comms"] if x["created_by"] == "ncclCommInitRank"][0]
        assert c["parent"] == world["comm_id"]
        assert c["state"] == "destroyed"
        entries = [e for e in d["entries"] if e["comm_id"] == c["comm_id"]]
        assert [e["collective_seq_id"] for e in entries] == [1, 2, 3]
    # same color, same child id; different colors, different ids
    ids = {r: [c["comm_id"] for c in d["comms"] if c["created_by"] == "ncclCommSplit"][0]
           for r, d in dumps.items()}
    assert ids[0] == ids[2] and ids[1] == ids[3] and ids[0] != ids[1], ids
    rc, out = verdicts(job)
    assert rc == 0 and out["verdicts"] == [], out


def test_fr_eight_ranks_skip():
    job = run_hanging("skip", nranks=8, extra=["--culprit", "5"])
    dumps = check_dumps_complete(job, 8)
    rc, out = verdicts(job)
    assert first(out) == ("missing_rank", [5], world_id(dumps), 9), out["verdicts"]


def test_fr_comms_created_before_attach():
    """The job made its communicator before tptrace attached: identity, rank and seq
    alignment are inferred by tptrace-fr from the collective sequence, and say so."""
    need_root()
    # healthy: nothing to report
    job = Job(4, "healthy", steps=3, name="pre-healthy")
    try:
        job.record()
        job.go()
        job.wait_done()
        for w in job.ranks:
            w.finish()
        assert job.tracer.wait(30) == 0
    finally:
        job.kill()
    for r, d in job.dumps().items():
        c = d["comms"][0]
        assert c["cross_rank_id"] is False and c["learned"]["seq_origin"] == "attach"
        assert c["comm_id"].startswith("local:")
    rc, out = verdicts(job)
    assert rc == 0 and out["verdicts"] == [], out
    # a rank skips the allreduce of the last step
    job = Job(4, "skip", steps=3, name="pre-skip")
    try:
        job.record(["-v"])
        job.go()
        job.wait_hung()
        # the query (-v: one line per rank) is done before the dump is asked for
        assert job.tracer.err.wait_for(lambda l: sum(1 for x in job.tracer.err.lines
                                                     if " of 4, device " in x) >= 4, 60), \
            job.tracer.err.text()
        job.tracer.p.send_signal(signal.SIGUSR2)
        assert job.tracer.err.wait_for(
            lambda l: sum(1 for x in job.tracer.err.lines if "(signal)" in x) >= 4, 120)
        # the dumps asked for, not the final ones: the query is done a moment after the
        # attach snapshot, long before anyone asks for a dump
        signal_dumps = job.dumps()
        job.stop()
    finally:
        job.kill()
    for r, d in signal_dumps.items():
        assert d["dump_reason"] == "signal", d["dump_reason"]
        c = d["comms"][0]
        # rank and size asked from NCCL itself inside the hung process (its main thread
        # stopped for a moment and restored)
        assert (c["rank"], c["nranks"]) == (r, 4), c
        assert c["learned"]["rank"] == "nccl_query" and c["learned"]["nranks"] == "nccl_query", c
    rc, out = verdicts(job)
    assert rc == 1
    v = out["verdicts"][0]
    assert (v["rule"], v["ranks"], v["op"], v["seq"]) == ("missing_rank", [1], "all_reduce", 7), \
        out["verdicts"]
    assert v["comm"].startswith("inferred:") and v["confidence"] != "high", v


def test_fr_dump_triggers_fifo_and_stall():
    """A write to --dump-on dumps every process; pending work without progress for
    --stall-timeout dumps by itself (no job id in the environment: through a trigger for the
    communicator the ranks wait on, "nccl-comm:<id>"); both keep recording."""
    need_root()
    job = Job(2, "skip", steps=2, culprit=1, extra=["--init-after-go"], name="triggers")
    fifo = os.path.join(job.dir, "dump.fifo")
    try:
        job.record(["--dump-on", fifo, "--stall-timeout", "1"])
        assert os.path.exists(fifo)
        job.go()
        # the hang: no progress for 1 s with work pending -> one stall dump per process
        stalled = lambda: sum(1 for x in job.tracer.err.lines if ", stall) to " in x)
        assert job.tracer.err.wait_for(lambda l: stalled() >= 2, 120), job.tracer.err.text()
        ds = job.dumps().values()
        assert {d["dump_reason"] for d in ds} == {"trigger"}
        assert {d["trigger"]["reason"] for d in ds} == {"stall"}
        assert len({d["trigger"]["id"] for d in ds}) == 1
        with open(fifo, "w") as f:
            f.write("dump\n")
        assert job.tracer.err.wait_for(
            lambda l: sum(1 for x in job.tracer.err.lines if "(request)" in x) >= 2, 120), \
            job.tracer.err.text()
        assert {d["dump_reason"] for d in job.dumps().values()} == {"request"}
        # once per stall: no new stall dumps while nothing changes
        time.sleep(1.5)
        assert stalled() == 2
        assert job.stop() == 0
        assert {d["dump_reason"] for d in job.dumps().values()} == {"final"}
    finally:
        job.kill()
    for d in job.dumps().values():
        assert (os.stat(os.path.join(job.dump_dir, f"tptrace-fr.{d['host']}.{d['pid']}.json")).st_mode & 0o777) == 0o600


def test_fr_all_processes_including_later_ones():
    """tptrace fr -a records NCCL processes already running and ones started later."""
    need_root()
    import shutil
    from lib import Tracer
    dump_dir = os.path.join(tmp_dir(), "fr-all")
    shutil.rmtree(dump_dir, ignore_errors=True)
    tr = Tracer(["fr", "-a", "--dump-dir", dump_dir], ready=False)
    try:
        assert tr.err.wait_for(lambda l: "flight recorder on" in l, 30), tr.err.text()
        job = Job(2, "healthy", steps=2, extra=["--init-after-go"], name="all")
        try:
            pids = job.pids()
            for p in pids:
                assert tr.err.wait_for(lambda l, p=p: f"recording pid {p} " in l, 10), tr.err.text()
            job.go()
            job.wait_done()
            for w in job.ranks:
                w.finish()
            for p in pids:
                assert tr.err.wait_for(lambda l, p=p: f"dumped pid {p} (exit)" in l, 10), tr.err.text()
        finally:
            job.kill()
    finally:
        assert tr.stop() == 0
    import glob
    import json
    dumps = [json.load(open(f)) for f in glob.glob(os.path.join(dump_dir, "*.json"))]
    mine = [d for d in dumps if d["pid"] in pids]
    assert len(mine) == 2
    for d in mine:
        assert len([e for e in d["entries"] if e["op"] == "all_reduce"]) == 2


def tmp_dir():
    from lib import TMP
    os.makedirs(TMP, exist_ok=True)
    return TMP


def test_fr_full_dump_dir_and_bad_input():
    """Dumps to a full filesystem fail with one line each and recording goes on; bad input
    gets one clear line."""
    need_root()
    import subprocess
    from lib import run_tptrace
    rc, _, err = run_tptrace(["fr"])
    assert rc == 2 and "no process given: use -p PID or -a" in err, err
    rc, _, err = run_tptrace(["fr", "-p", "1", "-a"])
    assert rc == 2 and "-p and -a exclude each other" in err, err
    job = Job(2, "healthy", steps=2, extra=["--init-after-go", "--hold"], name="full")
    full = os.path.join(job.dir, "full")
    os.makedirs(full)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k,mode=0700", "tpfull", full], check=True)
    try:
        # a process without NCCL is refused
        from lib import WL as wl_dir, Workload
        nocuda = Workload([os.path.join(wl_dir, "nocuda")])
        rc, _, err = run_tptrace(["fr", "-p", str(nocuda.pid), "--dump-dir", job.dump_dir])
        nocuda.kill()
        assert rc == 1 and err.strip() == f"tptrace: pid {nocuda.pid} has no NCCL loaded (no libnccl.so.* mapped)", err
        with open(os.path.join(full, "filler"), "wb") as f:
            f.write(b"x" * 4096)
        job.dump_dir = full
        job.record()
        job.go()
        job.wait_done()
        job.tracer.p.send_signal(signal.SIGUSR2)
        assert job.tracer.err.wait_for(lambda l: "No space left on device" in l, 10), job.tracer.err.text()
        assert job.tracer.p.poll() is None, "keeps recording"
        errs = [l for l in job.tracer.err.lines if "No space left" in l]
        assert all(l.startswith("tptrace: writing flight-recorder dump ") for l in errs), errs
        assert job.stop() == 1, "the final dumps failed too"
    finally:
        job.kill()
        subprocess.run(["umount", full])


def test_fr_ring_keeps_newest_n():
    """--ring N: a ring of N entries per process; older entries are overwritten and counted,
    and exactly the newest N are dumped."""
    need_root()
    job = Job(4, "healthy", steps=3, extra=["--init-after-go"], name="ring")
    try:
        job.record(["--ring", "4"])
        job.run_clean()
    finally:
        job.kill()
    dumps = job.dumps()
    assert sorted(dumps) == [0, 1, 2, 3], sorted(dumps)
    for r, d in dumps.items():
        # 3 steps x (all_reduce, all_gather, broadcast, send, recv) = 15 recorded, 11 lost
        assert (d["ring_size"], d["entries_recorded"], d["entries_overwritten"]) == (4, 15, 11), \
            (d["ring_size"], d["entries_recorded"], d["entries_overwritten"])
        e = d["entries"]
        assert [(x["op"], x["collective_seq_id"], x["p2p_seq_id"]) for x in e] == [
            ("all_gather", 8, 0), ("broadcast", 9, 0), ("send", 0, 5), ("recv", 0, 6)], e
        # record ids count from 1: the 12th to the 15th record
        assert [x["record_id"] for x in e] == [12, 13, 14, 15], e
    # wrapped rings of a healthy job: nothing to report
    rc, out = verdicts(job)
    assert rc == 0 and out["verdicts"] == [], out


def test_fr_no_query_comms():
    """--no-query-comms: communicators created before attach are not asked about (no ptrace,
    no call injected): rank and size stay unknown and tptrace-fr infers them. The same job
    without the option (-v logs each query) is the control that shows a query is visible."""
    need_root()
    logs, dumps_by_mode = {}, {}
    for mode in ("query", "no-query"):
        job = Job(4, "skip", steps=3, name=f"noquery-{mode}")
        try:
            job.record(["-v"] + (["--no-query-comms"] if mode == "no-query" else []))
            job.go()
            job.wait_hung()
            if mode == "query":     # answered before the dump is asked for
                assert job.tracer.err.wait_for(lambda l: sum(1 for x in job.tracer.err.lines
                                                             if " of 4, device " in x) >= 4, 60), \
                    job.tracer.err.text()
            job.tracer.p.send_signal(signal.SIGUSR2)
            assert job.tracer.err.wait_for(
                lambda l: sum(1 for x in job.tracer.err.lines if "(signal)" in x) >= 4, 120), \
                job.tracer.err.text()
            assert job.stop() == 0
        finally:
            job.kill()
        pids = job.pids()
        logs[mode] = [l for l in job.tracer.err.lines if "ask NCCL" in l or
                      any(f"pid {p} comm 0x" in l for p in pids)]
        dumps_by_mode[mode] = job
    # control: one query per rank, answered
    assert len(logs["query"]) == 4 and all(" of 4, device " in l for l in logs["query"]), \
        logs["query"]
    assert logs["no-query"] == [], logs["no-query"]
    job = dumps_by_mode["no-query"]
    for r, d in job.dumps().items():
        c = d["comms"][0]
        assert c["comm_id"].startswith("local:") and c["cross_rank_id"] is False, c
        assert (c["rank"], c["nranks"]) == (None, None), c
        assert c["learned"] == {"comm_id": "unknown", "rank": "unknown", "nranks": "unknown",
                                "seq_origin": "attach"}, c["learned"]
    rc, out = verdicts(job)
    assert rc == 1
    v = out["verdicts"][0]
    # identity inferred from the sequences alone; comm ranks ordered by global rank
    assert (v["rule"], v["ranks"], v["comm_ranks"], v["op"], v["seq"]) == \
        ("missing_rank", [1], [1], "all_reduce", 7), out["verdicts"]
    assert v["comm"].startswith("inferred:") and v["confidence"] == "medium", v


def test_fr_dump_dir_refused_when_others_control_it():
    """A root daemon's dump directory that another user owns or can write (a pre-created
    /var/tmp-style one), or that is a symlink, is refused with one line before anything is
    attached; a missing one is created 0700."""
    need_root()
    import shutil
    from lib import run_tptrace, tmp_path
    base = tmp_path("fr-dirsec")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    os.chmod(base, 0o755)
    world = os.path.join(base, "world")         # what a user pre-creating /var/tmp/tptrace gets
    os.mkdir(world)
    os.chmod(world, 0o1777)
    group = os.path.join(base, "group")
    os.mkdir(group)
    os.chmod(group, 0o770)
    theirs = os.path.join(base, "theirs")       # mode 0700 but owned by the attacker
    os.mkdir(theirs)
    os.chmod(theirs, 0o700)
    os.chown(theirs, 65534, 65534)
    link = os.path.join(base, "link")           # to a directory that would pass the checks
    ok_dir = os.path.join(base, "ok")
    os.mkdir(ok_dir, 0o700)
    os.symlink(ok_dir, link)
    cases = [
        (world, f"tptrace: refusing dump directory {world}: writable by others (mode 1777); "
                "use one only its owner can write"),
        (group, f"tptrace: refusing dump directory {group}: writable by its group (mode 0770); "
                "use one only its owner can write"),
        (theirs, f"tptrace: refusing dump directory {theirs}: owned by uid 65534, not by uid 0 "
                 "that tptrace runs as"),
        (link, f"tptrace: refusing dump directory {link}: it is a symbolic link"),
    ]
    for d, want in cases:
        rc, out, err = run_tptrace(["fr", "-a", "--dump-dir", d, "-d", "0.2"])
        assert rc == 1 and err.strip() == want, (d, rc, err)
        assert os.listdir(d) == [], "nothing written there"
    fresh = os.path.join(base, "fresh", "dumps")
    rc, out, err = run_tptrace(["fr", "-a", "--dump-dir", fresh, "-d", "0.2"])
    assert rc == 0, err
    for d in (fresh, os.path.dirname(fresh)):
        st = os.lstat(d)
        assert (st.st_mode & 0o7777, st.st_uid) == (0o700, 0), (d, oct(st.st_mode))


def test_fr_dump_names_are_not_followed():
    """A symlink planted at a dump's name (or at the name of an earlier run's other format)
    is replaced by the dump, never written through."""
    need_root()
    import socket
    job = Job(2, "healthy", steps=2, extra=["--init-after-go"], name="nofollow")
    victim = os.path.join(job.dir, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.makedirs(job.dump_dir, mode=0o700)
    host = socket.gethostname()
    names = [f"tptrace-fr.{host}.{pid}.json" for pid in job.pids()]
    for n in names:
        os.symlink(victim, os.path.join(job.dump_dir, n))
    try:
        job.record()
        job.run_clean()
    finally:
        job.kill()
    with open(victim) as f:
        assert f.read() == "precious\n", "written through the symlink"
    for n in names:
        st = os.lstat(os.path.join(job.dump_dir, n))
        assert not os.path.islink(os.path.join(job.dump_dir, n)) and st.st_mode & 0o777 == 0o600, n
    assert sorted(job.dumps()) == [0, 1]
    assert sorted(os.listdir(job.dump_dir)) == sorted(names), "no temp files left"


def test_fr_max_dump_mb_and_gzip():
    """--max-dump-mb removes this host's oldest dumps first (counted in the log) and never
    the job's newest ones, other hosts' dumps or other files; --gzip dumps are read by
    tptrace-fr like plain ones (same verdict), and a broken .gz is named, not fatal."""
    need_root()
    import gzip
    import json
    import socket
    host = socket.gethostname()
    job = Job(4, "size", steps=3, extra=["--init-after-go"], name="retention")
    os.makedirs(job.dump_dir, mode=0o700)
    now = time.time()
    old = []
    for i, age in enumerate((300, 200, 100)):     # 3 x 400 KiB of this host's older dumps
        p = os.path.join(job.dump_dir, f"tptrace-fr.{host}.{900001 + i}.json")
        with open(p, "wb") as f:
            f.write(b" " * (400 << 10))
        os.utime(p, (now - age, now - age))
        old.append(p)
    keep = [os.path.join(job.dump_dir, "tptrace-fr.otherhost.77.json"),   # not ours
            os.path.join(job.dump_dir, "notes.txt")]                       # not a dump
    for p in keep:
        with open(p, "wb") as f:
            f.write(b" " * (600 << 10))
        os.utime(p, (now - 1000, now - 1000))
    stale = os.path.join(job.dump_dir, f"tptrace-fr.{host}.{job.pids()[0]}.json")
    with open(stale, "w") as f:     # an earlier plain dump of the same pid: superseded
        f.write("{}")
    os.utime(stale, (now - 50, now - 50))
    try:
        job.record(["--max-dump-mb", "1", "--gzip"])
        job.run_clean()
    finally:
        job.kill()
    err = job.tracer.err.text()
    # 1.2 MiB of old dumps plus the new ones: only the oldest had to go
    assert not os.path.exists(old[0]) and os.path.exists(old[1]) and os.path.exists(old[2]), \
        os.listdir(job.dump_dir)
    assert all(os.path.exists(p) for p in keep), os.listdir(job.dump_dir)
    assert not os.path.exists(stale), "one dump per process: the plain one is gone"
    removed = [l for l in job.tracer.err.lines if "retention: removed" in l]
    assert len(removed) == 1 and removed[0].startswith(
        "tptrace: retention: removed 1 oldest dump (0.4 MiB; 1 in all) to stay under 1.0 MiB"), err
    gz = sorted(n for n in os.listdir(job.dump_dir) if n.endswith(".json.gz"))
    assert gz == sorted(f"tptrace-fr.{host}.{pid}.json.gz" for pid in job.pids()), gz
    ranks = set()
    for n in gz:
        with gzip.open(os.path.join(job.dump_dir, n)) as f:
            ranks.add(json.load(f)["global_rank"])
    assert ranks == {0, 1, 2, 3}
    # the analyzer: the fillers are not JSON dumps; read only the job's .gz dumps
    for p in old[1:] + keep[:1]:
        os.unlink(p)
    rc, out = verdicts(job)
    r, ranks_, _, seq = first(out)
    assert (r, ranks_, seq) == ("size_mismatch", [1], 7), out
    # a broken .gz next to them: named as unreadable, the verdict stands
    with open(os.path.join(job.dump_dir, f"tptrace-fr.{host}.1.json.gz"), "wb") as f:
        f.write(b"\x1f\x8b\x08\x00garbage" * 10)
    rc2, out2 = verdicts(job)
    r, ranks_, _, seq = first(out2)
    assert (r, ranks_, seq) == ("size_mismatch", [1], 7), out2
    assert "not valid gzip" in json.dumps(out2), out2


def test_fr_dump_dir_swapped_while_recording():
    """The directory is checked for every round: swapped for a symlink (or opened to others)
    while recording, a dump round is refused with one line, recording goes on, and the next
    round after it is fixed writes again."""
    need_root()
    job = Job(2, "healthy", steps=2, extra=["--init-after-go", "--hold"], name="swap")
    elsewhere = os.path.join(job.dir, "elsewhere")
    os.makedirs(elsewhere, mode=0o700)
    try:
        job.record(["--stall-timeout", "0"])
        job.go()
        job.wait_done()
        real = job.dump_dir + ".real"
        os.rename(job.dump_dir, real)
        os.symlink(elsewhere, job.dump_dir)
        job.tracer.p.send_signal(signal.SIGUSR2)
        want = f"tptrace: refusing dump directory {job.dump_dir}: it is a symbolic link"
        assert job.tracer.err.wait_for(lambda l: l == want, 10), job.tracer.err.text()
        assert os.listdir(elsewhere) == [] and job.tracer.p.poll() is None
        os.unlink(job.dump_dir)
        os.rename(real, job.dump_dir)
        os.chmod(job.dump_dir, 0o777)
        job.tracer.p.send_signal(signal.SIGUSR2)
        assert job.tracer.err.wait_for(lambda l: "writable by others (mode 0777)" in l, 10), \
            job.tracer.err.text()
        assert not [n for n in os.listdir(job.dump_dir) if n.startswith("tptrace-fr.")]
        os.chmod(job.dump_dir, 0o700)
        job.dump_now()
        assert sorted(job.dumps()) == [0, 1]
        assert job.stop() == 0
    finally:
        job.kill()
    assert os.listdir(elsewhere) == []
