"""Tier 2: a dump's state is on disk before its stacks (issue 22 point 7). A round writes every
process's state file at capture ("stacks_pending": true, no snapshot), takes the snapshots, then
replaces each file with the complete dump (docs/fr-schema.md "State first"). The dump snapshot
is held with TPTRACE_TEST_SNAPSHOT_HOLD_WHILE (the threads stay stopped while that file
exists): the state files are seen while the ranks are stopped by it, then the complete files
once it is released, or, with the recorder SIGKILLed meanwhile, the state files are all there
is and tptrace-fr reads them as stacks unknown."""
import json
import os
import signal
import subprocess

from lib import TPTRACE, Tracer, need_root, task_state, wait_until
from ncclib import FR_TOOL, Job

NRANKS = 4
CULPRIT = 1
STACK_KEYS = ("stacks", "stacks_error", "stacks_pending", "state_written_ns")


def held_round(name, jobs):
    """A 4-rank job hung at step 0 (rank 1 idle outside NCCL), recorded with every dump
    snapshot held: the attach snapshots are let run, then a SIGUSR2 round's snapshots hold.
    Returns (job, tracer, hold file) once the state files are there, every rank stopped; the
    job is in jobs from its start (for release)."""
    need_root()
    job = Job(NRANKS, "idle", steps=3, culprit=CULPRIT, name=name,
              extra=["--announce", "--fault-step", "0"])
    jobs.append(job)
    hold = os.path.join(job.dir, "hold")
    job.go_and_hang(CULPRIT, "# culprit idle")
    args = ["fr", "--dump-dir", job.dump_dir, "-v", "--stack-samples", "1"]
    for p in job.pids():
        args += ["-p", str(p)]
    job.tracer = Tracer(args, ready=False, env={"TPTRACE_TEST_SNAPSHOT_HOLD_WHILE": hold})
    t = job.tracer
    assert t.err.wait_for(lambda l: "flight recorder on" in l, 120), t.err.text()
    # the attach snapshots ran (the hold file is not there yet): the next ones are the dump's
    for p in job.pids():
        assert t.err.wait_for(lambda l, p=p: f"pid {p}: attach snapshot in" in l, 60), t.err.text()
    open(hold, "w").close()
    t.p.send_signal(signal.SIGUSR2)
    for p in job.pids():
        assert t.err.wait_for(lambda l, p=p: f"pid {p}: state written to" in l, 60), t.err.text()
    # every rank is stopped by its dump snapshot, which waits on the hold file
    wait_until(lambda: all(task_state(p) == "t" for p in job.pids()), 60,
               "every rank stopped by its held dump snapshot")
    return job, t, hold


def release(job):
    """the recorder first: a rank killed while its snapshot holds it would wait in its exit
    stop for a tracer that never lets go"""
    if not job:
        return
    if job.tracer and job.tracer.p.poll() is None:
        job.tracer.p.kill()
        job.tracer.wait(30)
    job.kill()


def check_state_files(job, t):
    """the state files: there while the snapshots are held, the state, stacks pending"""
    states = job.dumps(pending=True)
    assert sorted(states) == list(range(NRANKS)), sorted(states)
    assert job.dumps() == {}, "a complete dump before its snapshot ended"
    assert not [l for l in t.err.lines if "dumped pid" in l], t.err.text()
    assert len({d["dump_set"]["id"] for d in states.values()}) == 1
    for r, d in states.items():
        assert d["stacks_pending"] is True and d["stacks"] == [], (r, d["stacks"])
        assert d["stacks_error"].startswith("pending: "), d["stacks_error"]
        assert "state_written_ns" not in d
        assert d["dump_reason"] == "signal" and d["version"] == 2
        assert d["in_call"] is not None and "entries" in d and "net" in d
    return states


def test_fr_early_state_file_then_complete():
    """the state file is on disk while the snapshot is held, and the complete file replaces
    it with the same state: every key but the stacks' equal, and when the state was written"""
    jobs = []
    try:
        job, t, hold = held_round("early-held", jobs)
        states = check_state_files(job, t)
        os.unlink(hold)
        for p in job.pids():
            assert t.err.wait_for(lambda l, p=p: f"dumped pid {p} (signal)" in l, 60), t.err.text()
        done = job.dumps()
        assert sorted(done) == list(range(NRANKS)), sorted(done)
        for r, d in done.items():
            assert "stacks_pending" not in d, r
            assert [s["taken"] for s in d["stacks"]] == ["attach", "dump"], d["stacks_error"]
            assert d["stacks_error"] is None
            s = states[r]
            assert {k: v for k, v in d.items() if k not in STACK_KEYS} == \
                {k: v for k, v in s.items() if k not in STACK_KEYS}, r
            # keys in the same order: the state file is the complete one less its stacks
            assert [k for k in d if k not in STACK_KEYS] == [k for k in s if k not in STACK_KEYS]
            w = d["state_written_ns"]
            assert isinstance(w, int) and d["dump_time_ns"] <= w, (w, d["dump_time_ns"])
            path = os.path.join(job.dump_dir, f"tptrace-fr.{d['host']}.{d['pid']}.json")
            assert w <= os.stat(path).st_mtime_ns, (w, os.stat(path).st_mtime_ns)
        # one dump each, said once
        assert sum(1 for l in t.err.lines if "dumped pid" in l) == NRANKS, t.err.text()
        assert job.stop() == 0, t.err.text()
    finally:
        for job in jobs:
            release(job)


def test_fr_early_recorder_killed_during_snapshot():
    """SIGKILL while the snapshots are held: the state files stay, each a readable dump, and
    tptrace-fr reads their stacks as unknown (the note names the ranks), never as "no thread
    in NCCL": no verdict from stacks it does not have"""
    jobs = []
    try:
        job, t, hold = held_round("early-killed", jobs)
        check_state_files(job, t)
        t.p.kill()      # the kernel detaches the held threads
        t.wait(30)
        os.unlink(hold)
        files = sorted(os.listdir(job.dump_dir))
        assert len([f for f in files if f.startswith("tptrace-fr.")]) == NRANKS, files
        for r, d in job.dumps(pending=True).items():
            assert d["stacks_pending"] is True, r
        p = subprocess.run([FR_TOOL, "--json", job.dump_dir], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        out = json.loads(p.stdout)
        assert out["verdicts"] == [], out["verdicts"]
        note = [n for n in out["input_notes"] if n.startswith("stacks pending")]
        assert note == ["stacks pending in the dumps of ranks 0, 1, 2, 3 (state-first files: "
                        "the recorder was still taking them); their stacks unknown"], \
            out["input_notes"]
        txt = subprocess.run([FR_TOOL, job.dump_dir], capture_output=True, text=True, timeout=60)
        assert txt.returncode == 0 and "note: stacks pending in the dumps of ranks 0, 1, 2, 3" \
            in txt.stdout, txt.stdout
    finally:
        for job in jobs:
            release(job)


def test_fr_early_dump_dir_unwritable_before_the_stacks():
    """the dump directory becomes unwritable (immutable: root too is refused, through the
    recorder's open directory fd as well) between the state files and the complete ones: one error line for the round, the state files stay as the dumps, each
    dump said and counted once, and recording goes on"""
    jobs = []
    immutable = None
    try:
        job, t, hold = held_round("early-ro", jobs)
        check_state_files(job, t)
        subprocess.run(["chattr", "+i", job.dump_dir], check=True)
        immutable = job.dump_dir
        os.unlink(hold)
        want = (f"tptrace: writing flight-recorder dump {job.dump_dir}/tptrace-fr.")
        assert t.err.wait_for(lambda l: l.startswith(want) and "with its stacks: Operation not "
                              "permitted (and the other dumps of the round); their state files "
                              "stay, stacks pending" in l, 60), t.err.text()
        for p in job.pids():
            assert t.err.wait_for(lambda l, p=p: f"dumped pid {p} (signal)" in l, 60), t.err.text()
        assert sum(1 for l in t.err.lines if "with its stacks" in l) == 1, t.err.text()
        assert sum(1 for l in t.err.lines if "dumped pid" in l) == NRANKS, t.err.text()
        states = job.dumps(pending=True)
        assert sorted(states) == list(range(NRANKS)), sorted(states)
        assert all(d["stacks_pending"] is True for d in states.values())
        assert t.p.poll() is None, t.err.text()
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", immutable])
        for job in jobs:
            release(job)


def test_fr_early_ring_read_while_a_round_holds():
    """A round of dumps of one job (held: its snapshots wait on the hold file) while another
    job the same recorder records runs on, polling its events every millisecond into a 1 MiB
    BPF ring: the recorder empties the ring meanwhile (held records wait in memory only while
    the state files are written; then they are consumed as usual), so the busy job's next
    dump counts no dropped event. The ring used to be left unread for the whole round: one
    recorder of 256 processes lost 250k-430k events in a round, and entries lost made
    type_mismatch of healthy ranks."""
    need_root()
    jobs = []
    try:
        busy = Job(2, "healthy", steps=1000000, name="early-busy",
                   env={"TORCHELASTIC_RUN_ID": "busy"},
                   extra=["--announce", "--kernels", "1", "--compute-us", "20000"])
        jobs.append(busy)
        held = Job(2, "idle", steps=3, culprit=1, name="early-heldjob",
                   env={"TORCHELASTIC_RUN_ID": "held"},
                   extra=["--announce", "--fault-step", "0"])
        jobs.append(held)
        hold = os.path.join(held.dir, "hold")
        held.go_and_hang(1, "# culprit idle")
        busy.go()
        args = ["fr", "--dump-dir", held.dump_dir, "-v", "--stack-samples", "1",
                "--ring-mb", "1"]
        for p in busy.pids() + held.pids():
            args += ["-p", str(p)]
        t = Tracer(args, ready=False, env={"TPTRACE_TEST_SNAPSHOT_HOLD_WHILE": hold})
        held.tracer = t
        assert t.err.wait_for(lambda l: "flight recorder on" in l, 120), t.err.text()
        for p in busy.pids() + held.pids():
            assert t.err.wait_for(lambda l, p=p: f"pid {p}: attach snapshot in" in l, 60), \
                t.err.text()
        open(hold, "w").close()
        p = subprocess.run([TPTRACE, "fr", "--trigger", held.dump_dir, "--job", "held",
                            "--host-id", "test"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        for pid in held.pids():
            assert t.err.wait_for(lambda l, pid=pid: f"pid {pid}: state written to" in l, 60), \
                t.err.text()
        wait_until(lambda: all(task_state(pid) == "t" for pid in held.pids()), 60,
                   "the held job's ranks stopped by their held dump snapshots")
        # the busy job runs on through the round: 150 steps of ~20 ms, a cudaEventQuery a
        # millisecond each rank, entry and return: several MiB through a 1 MiB ring
        w = busy.ranks[0]
        last = [int(l.split()[2]) for l in w.out.lines if l.startswith("# step ")][-1]
        assert w.out.wait_for(lambda l: l.startswith("# step ") and
                              int(l.split()[2]) >= last + 150, 300), w.out.text()[-300:]
        assert all(task_state(pid) == "t" for pid in held.pids()), "the round ended early"
        os.unlink(hold)
        for pid in held.pids():
            assert t.err.wait_for(lambda l, pid=pid: f"dumped pid {pid} (trigger" in l, 60), \
                t.err.text()
        # the busy job's dump: what the recorder counted dropped since it started (SIGUSR2:
        # a trigger per known job, answered by this recorder too)
        t.p.send_signal(signal.SIGUSR2)
        for pid in busy.pids():
            assert t.err.wait_for(lambda l, pid=pid: f"dumped pid {pid} (" in l, 120), \
                t.err.text()
        dumps = [json.load(open(os.path.join(held.dump_dir, f)))
                 for f in os.listdir(held.dump_dir) if f.startswith("tptrace-fr.")]
        mine = [d for d in dumps if d["pid"] in busy.pids()]
        assert len(mine) == 2, [d["pid"] for d in dumps]
        for d in mine:
            assert d["events_dropped"] == 0, (d["pid"], d["events_dropped"])
            assert d["entries_recorded"] > 150, (d["pid"], d["entries_recorded"])
    finally:
        for job in jobs:
            release(job)
