"""Tier 2: two flight recorders claiming one pid (issue 12 "Bad input"). The first recorder
claims each process it records (user/fr/fr_claim.c); a second one on the same pid says so in
one line and does not record it twice, while the first goes on recording; once the first
exits, the claim is gone with it and the pid can be recorded again. A claim name squatted
by a non-root process is no recorder: said, and the pid is recorded anyway."""
import os
import socket
import subprocess
from lib import TPTRACE, Tracer, need_root, run_tptrace
from ncclib import Job


def test_fr_two_recorders_one_pid():
    need_root()
    job = Job(2, "healthy", steps=2, extra=["--init-after-go", "--hold"], name="claim")
    p0, p1 = job.pids()
    other = os.path.join(job.dir, "other")
    os.makedirs(other, mode=0o700)
    try:
        job.record(["--stall-timeout", "0"])
        first = job.tracer.p.pid
        # a second recorder of one of them: one line, exit 1, no probes, no dump
        rc, _, err = run_tptrace(["fr", "-p", str(p1), "--dump-dir", other])
        assert rc == 1, err
        assert err.strip() == (f"tptrace: pid {p1} is already recorded by another flight "
                               f"recorder (pid {first}): not recording it twice"), err
        assert os.listdir(other) == [], os.listdir(other)
        # the first one records on: the job runs, its dumps are complete
        job.go()
        job.wait_done()
        job.stop()
        assert sorted(job.dumps()) == [0, 1]
        # the first is gone, and its claims with it: recorded again
        t = Tracer(["fr", "-p", str(p1), "--dump-dir", other], ready=False)
        line = t.err.wait_for(lambda l: "flight recorder on" in l or "already recorded" in l, 30)
        assert line and "flight recorder on" in line, t.err.text()
        assert t.stop() == 0, t.err.text()
    finally:
        job.kill()


def test_fr_claim_squatted_by_a_user():
    """Any user can bind an abstract socket name: a squatter is not taken for a recorder."""
    need_root()
    job = Job(1, "healthy", steps=1, extra=["--init-after-go", "--hold"], name="squat")
    pid = job.pids()[0]
    with open(f"/proc/{pid}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    code = ("import socket,sys,time\n"
            "s=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM)\n"
            f"s.bind('\\0tptrace-fr.{pid}.{start}')\n"
            "s.listen(1)\nprint('bound',flush=True)\ntime.sleep(60)\n")
    squat = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              "python3", "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert squat.stdout.readline().strip() == "bound"
        job.record(["--stall-timeout", "0"])
        err = job.tracer.err.text()
        assert (f"tptrace: pid {pid}: the recorder claim is held by pid {squat.pid} of uid "
                f"65534, not a recorder: recording anyway") in err, err
        assert f"recording pid {pid} " in err, err
        job.run_clean()
        assert list(job.dumps()) == [0]
    finally:
        squat.kill()
        squat.wait()
        job.kill()
