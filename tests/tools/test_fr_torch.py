#!/usr/bin/env python3
"""tptrace-fr and PyTorch's flight-recorder dumps (docs/fr-torch.md).

PyTorch-format pickles are built here with Python's own pickle module from the documented
schema (shared/REFERENCE-2.md section 2; torch/csrc/distributed/c10d/FlightRecorder*.cpp), so
no torch install is needed. Checks: exact verdicts on PyTorch dumps alone and mixed with
tptrace dumps; every pickle protocol 2-5; round trip (tptrace JSON -> --export-torch ->
pickle.load schema check -> tptrace-fr -> the JSON's verdicts); hostile pickles refused in one
line with nothing executed.
Run from the repo root after `make tptrace-fr`. Prints `ok <name>` or `FAIL <name>: reason`.
`tests/tools/test_fr_torch.py --corpus` (re)writes the fuzz seeds into tests/tools/corpus.
"""
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

FR = "./tptrace-fr"
DATA = "tests/tools/data"
CORPUS = "tests/tools/corpus"
T0 = 1_700_000_000_000_000_000


def entry(rid, pg, seq, op="all_reduce", size=1024, dtype="Float", state="completed",
          p2p_seq=0, prof=None, out_size=None, t=None):
    """One entry as FlightRecorder::dump writes it (version 2.10)."""
    pg_name, pg_desc, pg_id = pg
    done = state == "completed"
    created = t if t is not None else T0 + rid * 1_000_000
    return {
        "record_id": rid, "pg_id": pg_id, "process_group": (pg_name, pg_desc),
        "collective_seq_id": seq, "p2p_seq_id": p2p_seq, "op_id": rid + 1,
        "profiling_name": prof or f"nccl:{op}", "time_created_ns": created,
        "input_sizes": [[size]], "input_dtypes": [dtype],
        "output_sizes": [[out_size if out_size is not None else size]],
        "output_dtypes": [dtype], "state": state,
        "time_discovered_started_ns": created + 100 if state != "scheduled" else None,
        "time_discovered_completed_ns": created + 900 if done else None,
        "retired": done, "timeout_ms": 600000, "is_p2p": prof is not None and "->" in prof
        or prof is not None and "<-" in prof,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 42},
                   {"name": "<module>", "filename": "train.py", "line": 99}],
        "thread_id": "140234", "thread_name": "pt_main_thread",
    }


WORLD = ("0", "default_pg", 0)


def torch_dump(pgs, entries, status):
    """pgs: {name: global ranks}; status: {pg_id: (enq, started, completed)}"""
    return {
        "version": "2.10", "comm_lib_version": "2.21.5",
        "pg_config": {n: {"name": n, "desc": "default_pg" if n == "0" else "undefined",
                          "ranks": str(r)} for n, r in pgs.items()},
        "pg_status": {str(k): {"last_enqueued_collective": v[0], "last_started_collective": v[1],
                               "last_completed_collective": v[2]} for k, v in status.items()},
        "entries": entries,
    }


def job(ranks=4, n=8, culprit=None, scenario=None):
    """{global rank: dump dict} of an all_reduce loop on the world pg; the last collective
    is still running everywhere (the hang)."""
    dumps = {}
    for r in range(ranks):
        ents = []
        last = n
        for s in range(1, n + 1):
            size, dtype, op = 1024, "Float", "all_reduce"
            if r == culprit and s == n:
                if scenario == "size":
                    size = 4096
                elif scenario == "dtype":
                    dtype = "BFloat16"
                elif scenario == "op":
                    op = "broadcast"
            if r == culprit and scenario == "missing" and s == n:
                last = n - 1
                break
            ents.append(entry(s - 1, WORLD, s, op=op, size=size, dtype=dtype,
                              state="completed" if s < n else "started"))
        dumps[r] = torch_dump({"0": list(range(ranks))}, ents,
                              {0: (last, last, min(last, n - 1))})
    return dumps


def write(dirname, dumps, proto=2, prefix="nccl_trace_rank_"):
    os.makedirs(dirname, exist_ok=True)
    for r, d in dumps.items():
        with open(os.path.join(dirname, f"{prefix}{r}"), "wb") as f:
            f.write(pickle.dumps(d, protocol=proto))


def run_fr(dirname, *args):
    p = subprocess.run([FR, "--json", *args, dirname], capture_output=True, text=True, timeout=120)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return p.returncode, out, p.stderr


def verdicts(out):
    return [(v["rule"], v["comm"], v["seq"], v["ranks"], v["comm_ranks"]) for v in out["verdicts"]]


def expect(dirname, rc, want, torch_ranks=None):
    got_rc, out, err = run_fr(dirname)
    if out is None:
        return f"no JSON report (rc {got_rc}, stderr {err.strip()!r})"
    got = verdicts(out)
    if got_rc != rc or got != want:
        return f"rc {got_rc} verdicts {got}, want rc {rc} {want}"
    if torch_ranks is not None:
        names = sorted(d["global_rank"] for d in out.get("pytorch_dumps", []))
        if names != torch_ranks:
            return f"pytorch_dumps ranks {names}, want {torch_ranks}"
    return None


def case_scenarios(tmp):
    res = []
    cases = {
        "healthy": (job(), 0, []),
        "size": (job(culprit=2, scenario="size"), 1, [("size_mismatch", "0", 8, [2], [2])]),
        "dtype": (job(culprit=1, scenario="dtype"), 1, [("dtype_mismatch", "0", 8, [1], [1])]),
        # a different collective is a type mismatch (op_mismatch is the reduce op, which
        # PyTorch does not record)
        "type": (job(culprit=3, scenario="op"), 1, [("type_mismatch", "0", 8, [3], [3])]),
        "missing_rank": (job(culprit=3, scenario="missing"), 1,
                         [("missing_rank", "0", 8, [3], [3])]),
    }
    for name, (dumps, rc, want) in cases.items():
        d = os.path.join(tmp, name)
        write(d, dumps)
        res.append((f"torch_{name}", expect(d, rc, want, torch_ranks=sorted(dumps))))
    # a 2-rank subgroup "1" of global ranks [1, 3] on top of a healthy world: its comm ranks
    # come from pg_config's ranks string, not from the global rank
    dumps = job()
    sub = ("1", "undefined", 1)
    for g, size in ((1, 512), (3, 2048)):
        dumps[g]["pg_config"]["1"] = {"name": "1", "desc": "undefined", "ranks": "[1,3]"}
        dumps[g]["entries"].append(entry(100, sub, 1, size=size, state="started"))
        dumps[g]["pg_status"]["1"] = {"last_enqueued_collective": 1,
                                      "last_started_collective": 1,
                                      "last_completed_collective": -1}
    d = os.path.join(tmp, "subgroup")
    write(d, dumps)
    res.append(("torch_subgroup_tie", expect(d, 1, [("size_mismatch", "1", 1, [1, 3], [0, 1])])))
    # p2p: rank 0 sends to 1, rank 1 never posts the recv (it is in the world all_reduce)
    dumps = job()
    dumps[0]["entries"].append(entry(50, WORLD, 8, prof="nccl:send 0->1", p2p_seq=1,
                                     state="started"))
    dumps[0]["entries"][-1]["is_p2p"] = True
    d = os.path.join(tmp, "p2p")
    write(d, dumps)
    rc, out, err = run_fr(d)
    got = [v[0] for v in verdicts(out)] if out else err
    res.append(("torch_p2p_unmatched",
                None if out and "p2p_mismatch" in got and rc == 1 else f"rc {rc}: {got}"))
    # every protocol Python writes (FRAME, MEMOIZE, SHORT_BINUNICODE from 4 on)
    for proto in (2, 3, 4, 5):
        d = os.path.join(tmp, f"proto{proto}")
        write(d, job(culprit=2, scenario="size"), proto=proto)
        res.append((f"torch_protocol_{proto}", expect(d, 1, [("size_mismatch", "0", 8, [2], [2])])))
    # --tail N keeps the newest N entries of a PyTorch dump too, and says how many it left out
    d = os.path.join(tmp, "tail")
    write(d, job(culprit=2, scenario="size"))
    rc, out, err = run_fr(d, "--tail", "3")
    skipped = out["read"]["entries_skipped"] if out else None
    res.append(("torch_tail", None if out and rc == 1 and skipped == 4 * 5 and verdicts(out) ==
                [("size_mismatch", "0", 8, [2], [2])] else f"rc {rc} skipped {skipped}: {err}"))
    # found by content, not by name: a custom prefix (TORCH_FR_DUMP_TEMP_FILE) still reads;
    # a FIFO like PyTorch's <prefix><rank>.pipe is never opened (it would block)
    d = os.path.join(tmp, "prefix")
    write(d, job(culprit=0, scenario="size"), prefix="myjob_fr_")
    os.mkfifo(os.path.join(d, "myjob_fr_0.pipe"))
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("not a dump\n")
    res.append(("torch_custom_prefix_and_pipe",
                expect(d, 1, [("size_mismatch", "0", 8, [0], [0])], torch_ranks=[0, 1, 2, 3])))
    return res


def gloo_job(ranks=4, n=5, culprit=None, desc="default_pg", subgroup=False):
    """{global rank: dump} as PyTorch 2.13's gloo recorder writes them (seen on a real job,
    tests/e2e/test_torch2.py): every entry "scheduled", pg_config under the name "" (with
    "[]" for ranks that are also in a second group), the entries' pg named ("0", desc)."""
    dumps = {}
    for r in range(ranks):
        last = n - 1 if r == culprit else n
        ents = [entry(s - 1, ("0", desc, 0), s, state="scheduled") for s in range(1, last + 1)]
        for e in ents:
            e["profiling_name"] = "gloo:all_reduce"
            e["time_discovered_started_ns"] = e["time_discovered_completed_ns"] = None
        in_sub = subgroup and r % 2 == 0
        d = torch_dump({}, ents, {0: (last, -1, n - 1 if r != culprit else n - 1)})
        d["pg_config"] = {"": {"name": "", "desc": "",
                               "ranks": "[]" if in_sub else str(list(range(ranks)))}}
        dumps[r] = d
    return dumps


def case_gloo(tmp):
    """PyTorch 2.13's gloo dumps: the default group is placed by the global rank; a group
    whose ranks no dump gives is never called healthy when its members stopped at different
    seqs and none completed the newest one, and nobody is blamed for it."""
    res = []
    cases = {
        "gloo_missing_rank": (gloo_job(culprit=2, subgroup=True), 1,
                              [("missing_rank", "0", 5, [2], [2])]),
        "gloo_healthy": (gloo_job(), 0, []),
        "gloo_ranks_unknown": (gloo_job(culprit=2, desc="undefined"), 1,
                               [("comm_ranks_unknown", "0", 5, [], [])]),
        "gloo_ranks_unknown_healthy": (gloo_job(desc="undefined"), 0, []),
    }
    for name, (dumps, rc, want) in cases.items():
        d = os.path.join(tmp, name)
        write(d, dumps, prefix="rank_")
        res.append((f"torch_{name}", expect(d, rc, want, torch_ranks=sorted(dumps))))
    return res


def case_mixed(tmp):
    """tptrace dumps of one job next to PyTorch dumps of it (its pgs): both judged, the
    report says which were PyTorch's."""
    res = []
    d = os.path.join(tmp, "mixed")
    shutil.copytree(os.path.join(DATA, "healthy"), d)
    write(d, job(culprit=1, scenario="dtype"))
    res.append(("mixed_torch_culprit",
                expect(d, 1, [("dtype_mismatch", "0", 8, [1], [1])], torch_ranks=[0, 1, 2, 3])))
    d = os.path.join(tmp, "mixed2")
    shutil.copytree(os.path.join(DATA, "size"), d)
    write(d, job())
    res.append(("mixed_tptrace_culprit",
                expect(d, 1, [("size_mismatch", "5a0052b913b21d24", 16, [2], [2])],
                       torch_ranks=[0, 1, 2, 3])))
    return res


ENTRY_KEYS = {
    "record_id": (int, type(None)), "pg_id": (int,), "process_group": (tuple,),
    "collective_seq_id": (int, type(None)), "p2p_seq_id": (int, type(None)),
    "op_id": (int, type(None)), "profiling_name": (str,),
    "time_created_ns": (int, type(None)), "input_sizes": (list, type(None)),
    "input_dtypes": (list, type(None)), "output_sizes": (list, type(None)),
    "output_dtypes": (list, type(None)), "state": (str,),
    "time_discovered_started_ns": (int, type(None)),
    "time_discovered_completed_ns": (int, type(None)), "retired": (bool,),
    "timeout_ms": (int, type(None)), "is_p2p": (bool,), "frames": (list,),
    "thread_id": (str, type(None)), "thread_name": (str, type(None)),
}


def check_schema(path, json_path):
    with open(path, "rb") as f:
        d = pickle.load(f)
    with open(json_path) as f:
        src = json.load(f)
    if set(d) != {"version", "comm_lib_version", "pg_config", "pg_status", "entries"}:
        return f"top-level keys {sorted(d)}"
    if d["version"] != "2.10" or d["comm_lib_version"] != src.get("nccl_version"):
        return f"version {d['version']!r} comm_lib_version {d['comm_lib_version']!r}"
    comms = {c["comm_id"]: c for c in src["comms"]}
    for name, pg in d["pg_config"].items():
        ranks = json.loads(pg["ranks"])
        c = comms[name]
        if pg["name"] != name or len(ranks) != c["nranks"] or ranks[c["rank"]] != src["global_rank"]:
            return f"pg_config {name}: {pg} vs comm {c['rank']}/{c['nranks']}"
    src_entries = [e for e in src["entries"] if e.get("op") not in ("comm_init", "other", None)]
    if len(d["entries"]) != len(src_entries):
        return f"{len(d['entries'])} entries, the JSON has {len(src_entries)}"
    for e, s in zip(d["entries"], src_entries):
        if set(e) != set(ENTRY_KEYS):
            return f"entry keys {sorted(set(e) ^ set(ENTRY_KEYS))}"
        for k, types in ENTRY_KEYS.items():
            if not isinstance(e[k], types):
                return f"entry {e['record_id']}: {k} is {type(e[k]).__name__}"
        want = {"record_id": s["record_id"], "collective_seq_id": s["collective_seq_id"],
                "p2p_seq_id": s["p2p_seq_id"], "time_created_ns": s["time_created_ns"],
                "time_discovered_completed_ns": s["time_discovered_completed_ns"],
                "is_p2p": s["op"] in ("send", "recv"),
                "state": {"enqueued": "scheduled"}.get(s["state"], s["state"])}
        for k, v in want.items():
            if e[k] != v:
                return f"entry {s['record_id']}: {k} {e[k]!r}, the JSON has {v!r}"
        # fr_trace's Op: "backend:type[ meta]" with type one of its collectives or send/recv
        backend, name = e["profiling_name"].split(":")
        if backend != "nccl" or name.split(" ")[0] != s["op"] or (
                e["is_p2p"] and name != f"{s['op']} {src_comm_rank(src, s)}"
                f"{'->' if s['op'] == 'send' else '<-'}{s['peer']}"):
            return f"entry {s['record_id']}: profiling_name {e['profiling_name']!r}"
        prod = sum(eval_prod(x) for x in s["input_sizes"])
        if e["input_sizes"] != [[prod]] or e["process_group"][0] != s["comm_id"]:
            return f"entry {s['record_id']}: input_sizes {e['input_sizes']} vs {prod}"
        if e["op_id"] is not None or e["timeout_ms"] is not None:
            return "op_id/timeout_ms: unknown must be None, never a made-up number"
        # --py-stacks frames go over as they are (PyTorch's keys, innermost first); none: []
        if e["frames"] != s.get("frames", []):
            return f"entry {s['record_id']}: frames {e['frames']!r}, the JSON has " \
                   f"{s.get('frames')!r}"
    return None


def src_comm_rank(src, e):
    return next(c["rank"] for c in src["comms"] if c["comm_id"] == e["comm_id"])


def eval_prod(dims):
    p = 1
    for x in dims:
        p *= x
    return p


# the saved sets whose verdicts rest only on what PyTorch's format records (no process
# state, in-call threads, stacks, reduce op or root: those rules have nothing to read there)
ROUND_TRIP = ["healthy", "size", "dtype", "tie", "p2p", "p2p_count", "late",
              "two_comms", "wrap_size", "type"]


def case_round_trip(tmp):
    res = []
    for name in ROUND_TRIP:
        src = os.path.join(DATA, name)
        out = os.path.join(tmp, f"rt_{name}")
        p = subprocess.run([FR, "--export-torch", out, src], capture_output=True, text=True)
        if p.returncode != 0:
            res.append((f"round_trip_{name}", f"export rc {p.returncode}: {p.stderr.strip()}"))
            continue
        err = None
        for f in sorted(os.listdir(src)):
            with open(os.path.join(src, f)) as fh:
                rank = json.load(fh)["global_rank"]
            err = check_schema(os.path.join(out, f"nccl_trace_rank_{rank}"), os.path.join(src, f))
            if err:
                err = f"{f}: {err}"
                break
        if not err:
            rc_j, out_j, _ = run_fr(src)
            rc_t, out_t, e = run_fr(out)
            if out_t is None:
                err = f"no report on the export: {e.strip()}"
            elif (rc_j, verdicts(out_j)) != (rc_t, verdicts(out_t)):
                err = f"JSON rc {rc_j} {verdicts(out_j)} != PyTorch rc {rc_t} {verdicts(out_t)}"
        res.append((f"round_trip_{name}", err))
    return res


def case_pyframes(tmp):
    """--py-stacks dumps: frames exported as PyTorch's, read back from the pickles, and the
    verdict's frames the same from either form"""
    src = os.path.join(DATA, "skip_pyframes")
    out = os.path.join(tmp, "rt_pyframes")
    p = subprocess.run([FR, "--export-torch", out, src], capture_output=True, text=True)
    if p.returncode != 0:
        return [("pyframes_export", f"export rc {p.returncode}: {p.stderr.strip()}")]
    err = None
    for f in sorted(os.listdir(src)):
        with open(os.path.join(src, f)) as fh:
            dump = json.load(fh)
        if not any(e.get("frames") for e in dump["entries"]):
            err = f"{f}: the saved set has no frames"
            break
        err = check_schema(os.path.join(out, f"nccl_trace_rank_{dump['global_rank']}"),
                           os.path.join(src, f))
        if err:
            err = f"{f}: {err}"
            break
    res = [("pyframes_export", err)]
    rc_j, out_j, _ = run_fr(src)
    rc_t, out_t, e = run_fr(out)
    if out_t is None:
        err = f"no report on the export: {e.strip()}"
    else:
        pj = out_j["verdicts"][0]["py_frames"]
        pt = out_t["verdicts"][0]["py_frames"]
        err = None if pj and pj == pt else f"py_frames JSON {pj!r} != PyTorch {pt!r}"
    res.append(("pyframes_from_pickle", err))
    return res


# ---- hostile pickles ----
class Exec:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def hostile(marker):
    healthy = pickle.dumps(job()[0], protocol=2)
    deep = []
    for _ in range(200):
        deep = [deep]
    return {
        "global_os_system": b"\x80\x02cos\nsystem\n(X" + len(f"touch {marker}").to_bytes(4, "little")
        + f"touch {marker}".encode() + b"tR.",
        "reduce_proto2": pickle.dumps({"version": "2.10", "x": Exec(marker)}, protocol=2),
        "stack_global_proto4": pickle.dumps({"version": "2.10", "x": Exec(marker)}, protocol=4),
        "deep_nesting": pickle.dumps({"version": "2.10", "pg_config": {}, "entries": deep},
                                     protocol=2),
        "huge_string_length": b"\x80\x02}(X\xff\xff\xff\xffversion",
        "huge_long": b"\x80\x02\x8b\xff\xff\xff\x7f" + b"\x01" * 16,
        "truncated": healthy[: len(healthy) // 2],
        "memo_get_unset": b"\x80\x02h\x07.",
        "bad_stop": b"\x80\x02N}.",
    }


# what each must be refused for (the one stderr line says it)
HOSTILE_WHY = {
    "global_os_system": "refused opcode GLOBAL", "reduce_proto2": "refused opcode GLOBAL",
    "stack_global_proto4": "refused opcode STACK_GLOBAL", "deep_nesting": "nested deeper than 64",
    "huge_string_length": "runs past the end", "huge_long": "integer of 2147483647 bytes",
    "truncated": "truncated", "memo_get_unset": "memo slot 7 read before",
    "bad_stop": "STOP with 2 values",
}


def case_hostile(tmp):
    res = []
    marker = os.path.join(tmp, "PWNED")
    for name, blob in hostile(marker).items():
        d = os.path.join(tmp, f"hostile_{name}")
        write(d, {r: v for r, v in job().items() if r != 3})
        with open(os.path.join(d, "nccl_trace_rank_3"), "wb") as f:
            f.write(blob)
        rc, out, err = run_fr(d)
        lines = [l for l in err.splitlines() if l.strip()]
        why = None
        if os.path.exists(marker):
            why = "the pickle ran a command"
        elif out is None:
            why = f"no report (rc {rc}): {err.strip()}"
        elif len(lines) != 1 or "nccl_trace_rank_3" not in lines[0] or "skipped" not in lines[0]:
            why = f"stderr is not one line naming the dump: {lines}"
        elif not any(v[0] == "corrupt_dump" and v[3] == [3] for v in verdicts(out)):
            why = f"no corrupt_dump verdict for rank 3: {verdicts(out)}"
        elif HOSTILE_WHY[name] not in lines[0]:
            why = f"refused, but not for {HOSTILE_WHY[name]!r}: {lines[0]}"
        res.append((f"hostile_{name}", why))
    return res


def write_corpus():
    seeds = [pickle.dumps(job(culprit=2, scenario="size")[2], protocol=p) for p in (2, 4, 5)]
    sub = job()[1]
    sub["pg_config"]["1"] = {"name": "1", "desc": "undefined", "ranks": "[1,3]"}
    sub["entries"].append(entry(100, ("1", "undefined", 1), 1, prof="nccl:send 0->1", p2p_seq=1))
    seeds.append(pickle.dumps(sub, protocol=2))
    seeds += list(hostile("/nonexistent/x").values())
    with tempfile.TemporaryDirectory() as t:
        subprocess.run([FR, "--export-torch", t, os.path.join(DATA, "p2p")], check=True,
                       capture_output=True)
        with open(os.path.join(t, "nccl_trace_rank_1"), "rb") as f:
            seeds.append(f.read())
    for s in seeds:
        with open(os.path.join(CORPUS, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
    print(f"wrote {len(seeds)} pickle seeds to {CORPUS}")


def main():
    if "--corpus" in sys.argv:
        write_corpus()
        return 0
    if not os.access(FR, os.X_OK):
        print(f"FAIL setup: {FR} not built (make tptrace-fr)")
        return 1
    tmp = tempfile.mkdtemp(prefix="fr_torch.")
    try:
        results = case_scenarios(tmp) + case_gloo(tmp) + case_mixed(tmp) + case_round_trip(tmp) + case_pyframes(tmp) + \
            case_hostile(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    failed = 0
    for name, err in results:
        if err:
            print(f"FAIL {name}: {err}")
            failed += 1
        else:
            print(f"ok {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
