"""Tier 2: issue 12's "Bad input" cases not covered elsewhere: the (shared) dump directory
gone mid-run (one line, made again, this round's dumps written, recording goes on), and a trigger
from a host whose clock is far off (its time is informational: still answered)."""
import json
import os
import signal
import socket
from lib import need_root, wait_until
from ncclib import Job


def test_fr_dump_dir_gone_mid_run():
    need_root()
    job = Job(2, "healthy", steps=2, extra=["--init-after-go", "--hold"], name="gone")
    try:
        job.record(["--stall-timeout", "0"])
        job.go()
        job.wait_done()
        job.dump_now()                      # a round opened it: the recorder knows it was there
        for n in os.listdir(job.dump_dir):
            os.unlink(os.path.join(job.dump_dir, n))
        away = job.dump_dir + ".away"
        os.rename(job.dump_dir, away)       # unmounted / removed under the recorder
        job.tracer.p.send_signal(signal.SIGUSR2)
        want = f"tptrace: dump directory {job.dump_dir} is gone: creating it again (recording goes on)"
        assert job.tracer.err.wait_for(lambda l: l == want, 10), job.tracer.err.text()
        wait_until(lambda: sorted(job.dumps()) == [0, 1], 60,
                   "this round's dumps written (nothing lost)")
        assert sorted(os.listdir(away)) == [], "nothing written through the old one"
        st = os.stat(job.dump_dir)
        assert st.st_mode & 0o777 == 0o700 and st.st_uid == 0
        # a second round: the directory is there, no second line
        job.dump_now(6)
        assert sum(1 for l in job.tracer.err.lines if l == want) == 1
        assert job.tracer.p.poll() is None
        assert job.stop() == 0
    finally:
        job.kill()


def test_fr_trigger_from_skewed_clock_answered():
    """A trigger whose origin clock is 20 years behind (or ahead) is still acted on once."""
    need_root()
    job = Job(2, "healthy", steps=2, extra=["--init-after-go", "--hold"], name="skew",
              env={"SLURM_JOB_ID": "skew-77"})
    try:
        job.record(["--stall-timeout", "0"])
        job.go()
        job.wait_done()
        for n, t in enumerate((946684800 * 10**9, 2524608000 * 10**9)):  # 2000, 2050
            tid = f"{n + 1:032x}"
            rec = {"schema": "tptrace-fr-trigger", "version": 1, "id": tid, "job": "skew-77",
                   "origin_host": "far-host", "reason": "command", "time_ns": t}
            tmp = os.path.join(job.dump_dir, f".t{n}")
            with open(tmp, "w") as f:
                json.dump(rec, f)
            os.rename(tmp, os.path.join(job.dump_dir, f"tptrace-trigger.{tid}.json"))
            want = n + 1
            ok = job.tracer.err.wait_for(
                lambda l: sum(1 for x in job.tracer.err.lines
                              if x.startswith("tptrace: trigger ") and "from far-host" in x) >= want, 10)
            assert ok, job.tracer.err.text()
            wait_until(lambda: {d.get("trigger", {}).get("id") for d in job.dumps().values()}
                       == {tid}, 60, f"every dump answering trigger {tid}")
        assert job.stop() == 0
    finally:
        job.kill()
