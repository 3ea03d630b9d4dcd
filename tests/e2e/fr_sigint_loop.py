"""Not a test (run.py does not collect it): the loop that reproduces false verdicts on healthy
jobs (issue 22). A healthy 4-rank simulated job recorded by `tptrace fr -p`, stopped with SIGINT
while it runs, analysed by tptrace-fr, N times. Per run: the verdicts (a healthy job has none),
the longest in-call age at the dumps' time, the set's capture spread, and how long the ranks
already in the newest collective had waited for the others at the capture.

    python3 tests/e2e/fr_sigint_loop.py 10          # this build
    TPTRACE_BIN=/path/old/tptrace python3 tests/e2e/fr_sigint_loop.py 10
"""
import os
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncclib import Job, analyze
runs = int(sys.argv[1])
bad = 0
for i in range(runs):
    job = Job(4, "healthy", steps=100000, name=f"repro{i}")
    try:
        job.record()
        job.go()
        for w in job.ranks:
            w.out.wait_for(lambda l: True, 1)
        time.sleep(0.3)
        job.stop()
        rc, out, err = analyze(job.dump_dir)
        vs = [(v["rule"], v.get("ranks"), v.get("confidence")) for v in out["verdicts"]]
        ds = job.dumps()
        spread = [d.get("dump_set", {}).get("capture_spread_ns") for d in ds.values()]
        # per comm, the newest collective seq some rank entered: how long had the ranks in it
        # waited (on the dump's own clock) for the ranks not there yet
        waits = []
        newest = {}
        for r, d in ds.items():
            for e in d["entries"]:
                if e["is_p2p"] or e["op"] == "comm_init":
                    continue
                k = e["comm_id"]
                if e["collective_seq_id"] > newest.get(k, (0,))[0]:
                    newest[k] = (e["collective_seq_id"],)
        for k, (seq,) in newest.items():
            inn = [(r, e) for r, d in ds.items() for e in d["entries"]
                   if e["comm_id"] == k and e["collective_seq_id"] == seq and not e["is_p2p"]]
            if len(inn) < len(ds):
                for r, e in inn:
                    waits.append((ds[r]["dump_time_ns"] - int(e["api_enter_ns"])) / 1e6)
        incall = max([(d["dump_time_ns"] - int(ic["entered_ns"])) / 1e6 for d in ds.values()
                      for ic in d["in_call"]] or [0])
        print(i, rc, vs, "max_in_call_ms", "%.2f" % incall, "spread_ns", spread[0], "ahead_waited_ms",
              ["%.2f" % w for w in waits], flush=True)
        bad += bool(out["verdicts"])
    finally:
        job.kill()
print("runs with a verdict:", bad, "of", runs)
