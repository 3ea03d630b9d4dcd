"""Tier 2: `--torch-trace DIR` and `--torch-logs` on a torch.compile'd CPU model (inductor, the
test venv's torch 2.x) that graph-breaks and recompiles (tests/workloads/torch_compile.py).

The same commands (three calls: a first compile of both graphs, a recompile on a new batch
size, one on a new Python constant) go to two copies of the model, each with an inductor
cache of its own, nothing compiled before:
  - one started with TORCH_TRACE=REF (torch's structured trace from the start);
  - one traced from outside with `--torch-trace OUT --torch-logs recompiles,graph_breaks`,
    switched on before the first command and off (Ctrl-C) after the last one.
OUT then holds one file, named as TORCH_TRACE names it, in TORCH_TRACE's format (a glog header
with the job's pid and a JSON object a line, payload lines after a tab, has_payload their md5),
with the same entries as REF's: the same kinds (dynamo_start, dynamo_output_graph, guards,
inductor_output_code, compilation_metrics, the recompile_reasons and graph-break artifacts,
...) for the same (frame id, frame compile id, attempt), as many of each; every interned string
an entry refers to defined. The logs file holds the graph break and both recompiles with their
guard failures; the job's output is that of the untraced run and nothing of the logs reached
its stderr."""
import collections
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess

from lib import ROOT, Tracer, Workload, fresh_tmp_path, need_root, tmp_path, venv_python

COMPILE = os.path.join(ROOT, "tests", "workloads", "torch_compile.py")
COMMANDS = ["run 4 1", "run 8 1", "run 8 2"]
# torch/_logging/_internal.py's TorchLogsFormatter(trace=True): "V1201 23:50:46.900000 8417
# torch/_dynamo/convert_frame.py:1000] {json}"
HEADER = re.compile(r"^([VIWEC])(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) (\d+) ([^\]\s]+:\d+)\] (\{.*\})$")
# what differs between any two runs: timing events (one a timed region), and string ids
VARIABLE = ("chromium_event", "str")


def fresh_dir(name):
    d = tmp_path(name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def start(py, name, env=None):
    e = {"TORCHINDUCTOR_CACHE_DIR": fresh_dir(name + ".inductor_cache")}
    e.update(env or {})
    wl = Workload([py, COMPILE], env=e, wait_ready=False)
    wl.wait_ready(180)
    return wl


def run_commands(wl):
    for i, c in enumerate(COMMANDS):
        wl.p.stdin.write(c + "\n")
        wl.p.stdin.flush()
        assert wl.out.wait_for(lambda l: l.startswith("RAN " + c[4:] + " "), 600), \
            (c, wl.out.text(), wl.err.text())


def quit(wl):
    wl.p.stdin.write("quit\n")
    wl.p.stdin.flush()
    wl.wait_done(120)
    assert wl.finish(60) == 0, wl.err.text()


def entries(path, pid):
    """[(record, payload)] of a TORCH_TRACE file, checking its format line by line."""
    out = []
    with open(path) as f:
        for line in f:
            if line.startswith("\t"):
                assert out, "a payload line before any entry"
                out[-1][1].append(line[1:])
                continue
            m = HEADER.match(line.rstrip("\n"))
            assert m, line[:300]
            assert int(m.group(4)) == pid, line[:300]
            out.append((json.loads(m.group(6)), []))
    for rec, payload in out:
        text = "".join(payload)
        text = text[:-1] if text.endswith("\n") else text
        if "has_payload" in rec:
            assert hashlib.md5(text.encode()).hexdigest() == rec["has_payload"], rec
        else:
            assert not payload, rec
    return [rec for rec, _ in out]


CONTEXT = ("rank", "frame_id", "frame_compile_id", "attempt", "compiled_autograd_id",
           "has_payload", "stack", "subgraph_name")


def kind(rec):
    names = [k for k in rec if k not in CONTEXT]
    assert len(names) == 1, rec
    name = names[0]
    if name == "artifact":
        return "artifact:" + rec["artifact"]["name"]
    return name


def shape(recs):
    """Each entry by its kind, its ids and which context keys it has; as many as there are."""
    return collections.Counter(
        (kind(r), r.get("frame_id"), r.get("frame_compile_id"), r.get("attempt"),
         tuple(sorted(k for k in r if k in CONTEXT)))
        for r in recs if kind(r) not in VARIABLE)


def check_strings(recs):
    """Every interned string id an entry uses is defined by a "str" entry before it."""
    defined = set()
    for r in recs:
        if kind(r) == "str":
            s, i = r["str"]
            assert isinstance(s, str) and i not in defined, r
            defined.add(i)
            continue
        for frame in r.get("stack", []) + r.get("dynamo_start", {}).get("stack", []):
            assert frame["filename"] in defined, (frame, sorted(defined)[:10])


@functools.lru_cache(maxsize=None)
def traced_runs():
    """Both copies of the model run once for the tests of this file: TORCH_TRACE from the start
    (REF) and `--torch-trace` from outside (OUT). Returns their files, pids and outputs."""
    need_root()
    py = venv_python()
    ref_dir = fresh_dir("torch2_trace_ref")
    ref = start(py, "torch2_trace_ref", {"TORCH_TRACE": ref_dir})
    try:
        run_commands(ref)
        quit(ref)
    finally:
        ref.kill()
    ref_files = glob.glob(os.path.join(ref_dir, "dedicated_log_torch_trace_*.log"))
    assert len(ref_files) == 1, os.listdir(ref_dir)

    out_dir = fresh_dir("torch2_trace_out")
    out = fresh_tmp_path("torch2_trace.json")
    wl = start(py, "torch2_trace_out")
    try:
        # (Tracer returns once the instruments are on: its "tracing" line comes after)
        tr = Tracer(["-p", str(wl.pid), "--torch-trace", out_dir, "--torch-logs",
                     "recompiles,graph_breaks", "-o", out], timeout=120)
        assert f"tptrace: --torch-trace: pid {wl.pid}: torch's structured trace on" in \
            tr.err.text(), tr.err.text()
        run_commands(wl)
        rc = tr.stop(timeout=120)
        err = tr.err.text()
        quit(wl)
    finally:
        wl.kill()
    assert rc == 0, err
    files = os.listdir(out_dir)
    assert len(files) == 1 and re.match(r"^dedicated_log_torch_trace_\w+\.log$", files[0]), files
    assert f"tptrace: --torch-trace: pid {wl.pid}: wrote {out_dir}/{files[0]}" in err, err
    return {"ref": ref, "ref_file": ref_files[0], "wl": wl, "out": out, "err": err,
            "out_file": os.path.join(out_dir, files[0])}


def test_torch2_trace_and_logs():
    r = traced_runs()
    ref, wl, out, err = r["ref"], r["wl"], r["out"], r["err"]
    logs = f"{out}.{wl.pid}.torch_logs.txt"
    assert f"tptrace: --torch-logs: pid {wl.pid}: wrote {logs}" in err, err

    # the job: same results, nothing of the logs in its stderr
    assert [l for l in wl.out.lines if l.startswith("RAN")] == \
        [l for l in ref.out.lines if l.startswith("RAN")]
    assert "[__recompiles]" not in wl.err.text() and "[__graph_breaks]" not in wl.err.text()

    mine = entries(r["out_file"], wl.pid)
    theirs = entries(r["ref_file"], ref.pid)
    check_strings(mine)
    check_strings(theirs)
    want, got = shape(theirs), shape(mine)
    assert got == want, {"missing": want - got, "extra": got - want}
    # what tlparse needs is there: both graphs compiled three times, their outputs, guards
    # and the reasons of the recompiles
    kinds = {k[0] for k in got}
    for k in ("dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str",
              "inductor_output_code", "compilation_metrics", "artifact:recompile_reasons",
              "artifact:dynamo_graph_break_reason"):
        assert k in kinds, (k, sorted(kinds))
    starts = sorted((k[1], k[2]) for k in got.elements() if k[0] == "dynamo_start")
    assert starts == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)], starts
    assert {kind(r) for r in mine} >= {"chromium_event", "str"}

    with open(logs) as f:
        text = f.read()
    rec = [l for l in text.splitlines() if "[__recompiles]" in l]
    assert sum("Recompiling function step in " in l for l in rec) == 2, text[:3000]
    assert sum("Recompiling function torch_dynamo_resume_in_step_at_" in l for l in rec) == 2
    assert any("size mismatch at index 0. expected 4, actual 8" in l for l in rec), rec
    assert any("scale == 1" in l for l in rec), rec
    assert any("[__graph_breaks] Graph break in user code at " + COMPILE in l
               for l in text.splitlines()), text[:3000]


# the compiles of torch_compile.py's three calls as tlparse names them: frame 0 (step) restarts
# once per compile at its graph break ([0/N] the break, [0/N_1] the graph), frame 1 (its resume
# function) compiles three times; [-/-] holds what has no compile id (torch's version)
TL_COMPILES = ["[-/-]", "[0/0]", "[0/0_1]", "[0/1]", "[0/1_1]", "[0/2]", "[0/2_1]",
               "[1/0]", "[1/1]", "[1/2]"]
TL_STATS = re.compile(r"^Stats \{ (.*) \}$", re.M)


def tlparse(log, name):
    """tlparse (the test venv's) on one TORCH_TRACE file, strict: an unrecognized line or one
    without a compile id fails it. Returns (its output directory, its stats, unknown fields)."""
    exe = os.path.join(os.path.dirname(venv_python()), "tlparse")
    assert os.access(exe, os.X_OK), f"tlparse absent from the test venv ({exe}): run make deps"
    out = fresh_dir(name)
    # it reads the file's own directory for other ranks' files: one file alone in its own
    src = fresh_dir(name + ".in")
    os.makedirs(src)
    shutil.copy(log, src)
    p = subprocess.run([exe, os.path.join(src, os.path.basename(log)), "-o", out, "--overwrite",
                        "--no-browser", "--strict", "--strict-compile-id"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    m = TL_STATS.findall(p.stderr)
    assert len(m) == 1, p.stderr[-3000:]
    stats = {k: int(v) for k, v in (kv.split(": ") for kv in m[0].split(", "))}
    unknown = re.findall(r"^Unknown fields: (\{.*\})", p.stderr, re.M)
    return out, stats, unknown


def rendered(out):
    """What tlparse rendered: {compile id: Counter of artifact kinds} (the kind is the name
    without tlparse's running number and inductor's code hash), after checking that the index,
    the failures page and every artifact the directory and the index link to are there."""
    with open(os.path.join(out, "index.html")) as f:
        index = f.read()
    assert os.path.exists(os.path.join(out, "failures_and_restarts.html"))
    with open(os.path.join(out, "compile_directory.json")) as f:
        directory = json.load(f)
    kinds = {}
    for cid, d in directory.items():
        kinds[cid] = collections.Counter()
        for a in d["artifacts"]:
            path = os.path.join(out, a["url"])
            assert os.path.isfile(path) and os.path.getsize(path) > 0, (cid, a)
            assert f'href="{a["url"]}"' in index, (cid, a["url"])
            k = re.sub(r"_[a-z0-9]{52}(?=_\d+\.)", "", a["name"])
            kinds[cid][re.sub(r"_\d+(\.\w+)$", r"\1", k)] += 1
    for href in re.findall(r'href="(-_[^"]+)"', index):
        assert os.path.isfile(os.path.join(out, href)), href
    return index, kinds


def test_torch2_trace_tlparse():
    """tlparse renders the file `--torch-trace` wrote as it renders TORCH_TRACE's own: no line
    it fails on or cannot place, the same compiles (ids, frames, restarts) with the same
    artifacts each, every compile's metrics page and inductor's code."""
    r = traced_runs()
    ref_out, ref_stats, ref_unknown = tlparse(r["ref_file"], "torch2_tlparse_ref")
    out, stats, unknown = tlparse(r["out_file"], "torch2_tlparse_out")
    for s in (ref_stats, stats):
        # Stats prints its nonzero counters: ok, unknown (fields it has no renderer for) and
        # the fail_* ones (glog header, JSON, payload md5, parser...)
        assert s.get("ok", 0) > 0 and not [k for k in s if k not in ("ok", "unknown")], s
    assert stats.get("unknown", 0) == ref_stats.get("unknown", 0) and unknown == ref_unknown, \
        (stats, unknown, ref_stats, ref_unknown)

    ref_index, ref_kinds = rendered(ref_out)
    index, kinds = rendered(out)
    assert sorted(kinds) == TL_COMPILES == sorted(ref_kinds), (sorted(kinds), sorted(ref_kinds))
    assert kinds == ref_kinds, {c: (kinds[c], ref_kinds[c]) for c in kinds
                                if kinds[c] != ref_kinds[c]}
    for c in ("[0/0_1]", "[0/1_1]", "[0/2_1]", "[1/0]", "[1/1]", "[1/2]"):
        for k in ("dynamo_output_graph.txt", "compilation_metrics.html",
                  "inductor_output_code.html", "dynamo_cpp_guards_str.txt"):
            assert kinds[c][k] == 1, (c, k, kinds[c])
    for c in ("[0/1]", "[0/2]", "[1/1]", "[1/2]"):
        assert kinds[c]["recompile_reasons.json"] == 1, (c, kinds[c])
    # the stack trie: the same frames compiled, from the same lines of the workload
    trie = re.compile(r"(\w+\.py):(\d+) in (\w+|&lt;module&gt;)")
    frames = set(trie.findall(index))
    assert frames == set(trie.findall(ref_index)), (frames, set(trie.findall(ref_index)))
    names = {f for p, _, f in frames if p == os.path.basename(COMPILE)}
    assert {"&lt;module&gt;", "main", "step"} < names and \
        any(n.startswith("torch_dynamo_resume_in_step_at_") for n in names), frames
    assert "3 restart(s)" in index and "3 restart(s)" in ref_index
