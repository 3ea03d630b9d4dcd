#!/usr/bin/env python3
"""Sweep tptrace-fr for wrong verdicts over generated dump sets (issue 22).

Run by hand (it is not part of `make test`):

    python3 tests/tools/fr_sweep.py [--runs N] [--seed S] [--budget SEC] [--show N]
                                    [--config 'GEN ARGS'] [--json FILE] [--fr ANALYZER]

(tests/tools/test_fr_sweep.py runs a small deterministic draw of it in the unit tier.)

Each run draws one configuration from the grid below, writes its dumps with
.output/tptrace-fr-gen, runs `./tptrace-fr --json` on them and checks invariants that need no
expected output, only the scenario and its culprit. Failures are grouped by class, each with
the generator command that reproduces it. The draw is deterministic for a given --seed.

The grid
    scenario   healthy skip late size type op killed stuck skip_on straggler p2p p2p_count
    size       ranks x per-host: 8x1 8x4 16x4 32x4 32x8 64x8 128x8 256x8
    identity   exact (ncclCommInitRank seen) | preexisting (--preexisting --attach-skew K,
               K in 0..5) | mixed (--preexisting-from F, some ranks exact, the rest inferred)
    dumps      --dump-spread-ms 0 | 1 | 2000 | 5000
    clocks     --host-offset-us 0 | 500000 | 2000000 | 40000000 | --clock-off-host H (years)
    timing     --entries 12 17 40 63 65 90 161 200 (either side of fr_infer.c's ALIGN_SAT 16
               and the 64 matches the alignment once stopped at), --period none | 3 | 7,
               --jitter-us 0 | 3000, --step-ms 1 | 20
    seed       --seed 1..9 (comm ids and jitter)
    culprit    a random rank

The invariants (docs/fr-verdicts.md: a cause's `ranks` lists only the ranks it blames; what
follows from a cause has `caused_by`; waiting ranks are victims, never blamed):

    crash       tptrace-fr exits other than 0/1, prints no JSON, or writes to stderr (the
                generated sets are good input)
    roles       check_roles: `caused_by` is null or an earlier cause; a cause's `waiting`
                ranks are not in its `ranks`; a consequence has no `waiting`
    healthy     a healthy job gets no verdict at all and exit 0 (whatever the dumps' timing;
                an ambiguous alignment is a note, not a verdict)
    innocent    a fault with culprit set C: no cause (caused_by null) blames a rank outside C
                (a rank that only waits is never blamed; consequences may list victims)
    first       the first verdict is a cause that blames exactly C, or blames nobody with
                confidence below high (`dumps_not_simultaneous` names hosts to dump again
                and may be high: it blames nobody and says so) -- never another rank first
    guess_high  a cause that blames C only, on an inferred comm or with clocks apart, may be
                high only where the dumps prove it (checked by `first`/`innocent`; not a class)
    (no_progress of every rank of the job singles out nobody: a hang the dumps show and
    nothing in them explains; it counts as blaming nobody for `innocent` and `first`)
    missed      a fault (not straggler) that gets no verdict at all (a hung job called
                healthy); a straggler missed where the rule's thresholds are met by
                construction (--step-ms 20: a 6 ms lag; 40 collectives or more in every
                rank's ring after the first host's dump: the job runs on while the dumps are
                taken, --dump-spread-ms apart) is `missed_straggler`
                (1 ms steps give a 0.3 ms lag, under the rule's 1 ms minimum: not a failure)

C per scenario: skip late size type op killed stuck skip_on straggler p2p -> {culprit};
p2p_count -> {culprit-1, culprit} (a send/recv count mismatch: which end is wrong cannot be
told).
"""
import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(ROOT, ".output", "tptrace-fr-gen")
FR = os.path.join(ROOT, "tptrace-fr")

SCEN = ["healthy", "healthy", "skip", "skip", "late", "size", "type", "op", "killed",
        "stuck", "skip_on", "straggler", "p2p", "p2p_count"]
SIZES = [(8, 1), (8, 4), (16, 4), (32, 4), (32, 8), (64, 8), (128, 8), (256, 8)]
SPREAD = [0, 1, 2000, 5000]
CLOCKS = [None, 500000, 2000000, 40000000, "years"]
ENTRIES = [12, 17, 40, 63, 65, 90, 161, 200]
PERIOD = [None, 3, 7]
JITTER = [0, 3000]
STEP = [1, 20]


def draw(rng):
    sc = rng.choice(SCEN)
    n, ph = rng.choice(SIZES)
    c = {"scenario": sc, "ranks": n, "per_host": ph,
         "ident": rng.choice(["exact", "pre", "mixed"]), "skew": rng.randint(0, 5),
         "spread": rng.choice(SPREAD), "clock": rng.choice(CLOCKS),
         "entries": rng.choice(ENTRIES), "period": rng.choice(PERIOD),
         "jitter": rng.choice(JITTER), "step": rng.choice(STEP), "seed": rng.randint(1, 9),
         "culprit": rng.randrange(n), "from": rng.randrange(1, n)}
    if sc.startswith("p2p"):
        c["period"] = None      # a training loop has no p2p in the generator
    return c


def gen_args(c):
    a = [f"--ranks {c['ranks']}", f"--per-host {c['per_host']}", f"--entries {c['entries']}",
         f"--step-ms {c['step']}", f"--seed {c['seed']}"]
    if c["scenario"] != "healthy":
        a.append(f"--scenario {c['scenario']} --culprit {c['culprit']}")
    if c["ident"] == "pre":
        a.append(f"--preexisting --attach-skew {c['skew']}")
    elif c["ident"] == "mixed":
        a.append(f"--preexisting-from {c['from']} --attach-skew {c['skew']}")
    if c["spread"]:
        a.append(f"--dump-spread-ms {c['spread']}")
    hosts = (c["ranks"] + c["per_host"] - 1) // c["per_host"]
    if c["clock"] == "years":
        if hosts > 1:
            a.append(f"--clock-off-host {hosts - 1}")
    elif c["clock"]:
        a.append(f"--host-offset-us {c['clock']}")
    if c["period"]:
        a.append(f"--period {c['period']}")
    if c["jitter"]:
        a.append(f"--jitter-us {c['jitter']}")
    return " ".join(a)


def culprits(sc, culprit, n):
    if sc == "healthy":
        return set()
    if sc == "p2p_count":
        return {(culprit - 1) % n, culprit}
    return {culprit}


def check_roles(vs):
    for i, v in enumerate(vs):
        c = v.get("caused_by", "absent")
        if c == "absent" or "waiting" not in v:
            return f"verdict {i} ({v['rule']}) lacks caused_by/waiting"
        if c is not None and not (0 <= c < i and vs[c]["caused_by"] is None):
            return f"verdict {i} ({v['rule']}) caused_by {c}: not an earlier cause"
        if v["waiting"] is not None:
            if c is not None:
                return f"verdict {i} ({v['rule']}) is a consequence with waiting ranks"
            both = set(v["waiting"]["ranks"]) & set(v["ranks"])
            if both:
                return f"verdict {i} ({v['rule']}) blames waiting ranks {sorted(both)}"
    return None


def judge(sc, culprit, n, rc, out, err, step=20, entries=200, spread=0):
    """[(class, why)] for one run"""
    if rc not in (0, 1) or out is None:
        return [("crash", f"exit {rc}: {err.strip()[:200]}")]
    res = []
    if err.strip():
        res.append(("crash", f"stderr: {err.strip()[:200]}"))
    vs = out["verdicts"]
    why = check_roles(vs)
    if why:
        res.append(("roles", why))
    if sc == "healthy":
        if vs or rc:
            blamed = any(v["ranks"] for v in vs)
            res.append(("healthy_blamed" if blamed else "healthy_verdict",
                        f"exit {rc}: " + short(vs)))
        return res
    want = culprits(sc, culprit, n)
    if not vs:
        if sc != "straggler":
            res.append(("missed", f"exit {rc}"))
        elif step >= 20 and entries - spread // step >= 40:
            res.append(("missed_straggler", f"exit {rc}"))
        return res
    for v in vs:
        if v["caused_by"] is None and not singles_out_nobody(v, n) and \
                set(r for r in v["ranks"] if r is not None) - want:
            res.append(("innocent", short(vs)))
            break
    f = vs[0]
    if singles_out_nobody(f, n):
        pass
    elif f["ranks"]:
        if set(f["ranks"]) != want:
            res.append(("first", short(vs)))
    elif f["confidence"] == "high" and f["rule"] != "dumps_not_simultaneous":
        res.append(("first", "nobody blamed, high: " + short(vs)))
    return res


def singles_out_nobody(v, n):
    """no_progress of every rank: the job hung and nothing in the dumps names a rank (a fault
    the generator planted where the dumps cannot show it leaves every rank waiting in the
    last collective for 60 s): the honest answer, no culprit claimed"""
    return v["rule"] == "no_progress" and set(r for r in v["ranks"] if r is not None) == \
        set(range(n))


def short(vs):
    return "; ".join(f"{v['rule']} seq {v['seq']} ranks {rl(v['ranks'])} "
                     f"cb {v['caused_by']} {v['confidence']}" for v in vs[:4]) + \
        (f"; +{len(vs) - 4}" if len(vs) > 4 else "")


def rl(rs):
    rs = [r for r in rs if r is not None]
    if len(rs) <= 6:
        return rs
    return f"{rs[:5]}..({len(rs)})"


def run_one(args, d):
    shutil.rmtree(d, ignore_errors=True)
    p = subprocess.run([GEN] + args.split() + ["-o", d], capture_output=True, text=True)
    if p.returncode:
        return None, None, "gen: " + p.stderr.strip()
    q = subprocess.run([FR, "--json", d], capture_output=True, text=True)
    try:
        out = json.loads(q.stdout)
    except ValueError:
        out = None
    return q.returncode, out, q.stderr


REDOP = ("all_reduce", "reduce", "reduce_scatter")
ROOTED = ("broadcast", "reduce")


def noop_fault(ga, culprit, d, tmp):
    """the fault changed nothing: the culprit's dump is the one it writes in the healthy job
    as the analyzer compares them (op and type plant a reduce op / all_gather at the last
    collective, which may be one already or have no reduce op: no verdict can name it; the
    generator still makes every rank wait there, see the report's gaps)"""
    t = ga.split()
    i = t.index("--scenario")
    twin = os.path.join(tmp, "twin")
    shutil.rmtree(twin, ignore_errors=True)
    subprocess.run([GEN] + t[:i] + t[i + 4:] + ["-o", twin], capture_output=True, check=True)

    def sigs(dd):
        """the culprit's collectives, signatures only (a hang's dumps come later)"""
        for f in os.listdir(dd):
            with open(os.path.join(dd, f)) as fh:
                j = json.load(fh)
            if j.get("global_rank") == culprit:
                return {(e["comm_id"], e["collective_seq_id"]): (
                    e.get("op"), e.get("count"), e.get("dtype"),
                    e.get("reduce_op") if e.get("op") in REDOP else None,
                    e.get("root") if e.get("op") in ROOTED else None)
                    for e in j["entries"] if not e.get("is_p2p")}
        return None
    a, b = sigs(d), sigs(twin)
    return all(b.get(k, v) == v for k, v in a.items())


def parse_config(s):
    """the scenario and culprit of a generator command line given by hand"""
    t = s.split()
    g = lambda k, dflt: t[t.index(k) + 1] if k in t else dflt
    n = int(g("--ranks", 8))
    return g("--scenario", "healthy"), int(g("--culprit", n // 2)), n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--budget", type=float, default=540, help="seconds, at most")
    ap.add_argument("--show", type=int, default=4, help="examples shown per class")
    ap.add_argument("--config", help="one generator command line instead of the grid")
    ap.add_argument("--json", help="write every failure here")
    ap.add_argument("--fr", help="the analyzer to sweep (default ./tptrace-fr)")
    args = ap.parse_args()
    if args.fr:
        globals()["FR"] = os.path.abspath(args.fr)
    for p in (GEN, FR):
        if not os.access(p, os.X_OK):
            sys.exit(f"fr_sweep: {p} missing (make all test-bins)")
    rng = random.Random(args.seed)
    fails = collections.defaultdict(list)
    t0 = time.monotonic()
    done = 0
    with tempfile.TemporaryDirectory(prefix="fr-sweep-") as tmp:
        # copies: a rebuild during the run does not swap the binaries under it
        for name in ("GEN", "FR"):
            dst = os.path.join(tmp, os.path.basename(globals()[name]))
            shutil.copy2(globals()[name], dst)
            globals()[name] = dst
        d = os.path.join(tmp, "set")
        todo = [args.config] if args.config else None
        for i in range(1 if todo else args.runs):
            if time.monotonic() - t0 > args.budget:
                break
            if todo:
                ga = todo[0]
                sc, cul, n = parse_config(ga)
            else:
                c = draw(rng)
                ga = gen_args(c)
                sc, cul, n = c["scenario"], c["culprit"], c["ranks"]
            rc, out, err = run_one(ga, d)
            done += 1
            if rc is None:
                fails["gen"].append((ga, err))
                continue
            t = ga.split()
            step, ents, spread = (int(t[t.index(k) + 1]) if k in t else dflt
                                  for k, dflt in (("--step-ms", 1), ("--entries", 100),
                                                  ("--dump-spread-ms", 0)))
            for cls, why in judge(sc, cul, n, rc, out, err, step, ents, spread):
                if cls == "missed" and noop_fault(ga, cul, d, tmp):
                    continue
                fails[cls].append((ga, why))
    dt = time.monotonic() - t0
    print(f"{done} runs in {dt:.0f} s (seed {args.seed})")
    for cls in sorted(fails, key=lambda k: -len(fails[k])):
        print(f"{cls}: {len(fails[cls])}")
        for ga, why in fails[cls][:args.show]:
            print(f"    {ga}\n        {why}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({k: v for k, v in fails.items()}, fh, indent=1)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
