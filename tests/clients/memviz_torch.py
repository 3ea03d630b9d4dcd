"""PyTorch's memory_viz command line (torch 2.x from the test venv) held against a tptrace
memory snapshot: `stats`, `trace`, `trace_plot` (plain, -s, -f) and `segment_plot` must run
without error and say what the snapshot says (segment count, bytes reserved and allocated, one
line per trace event, the same document embedded in each plot page).

check(snap, venv_py, path=None, workdir) -> list of errors (empty: memory_viz agrees).
`path` is a pickle tptrace wrote (--pickle); without it the snapshot is pickled here, as
torch.cuda.memory._dump_snapshot does (protocol 2)."""
import base64
import json
import os
import pickle
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def fmt_size(num):
    """memory_viz's size format (_format_size): 3.1f in B, KiB, MiB ... (written here, to
    compare against, not imported from torch)"""
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"]:
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}YiB"


def plot_document(html):
    """the snapshot a plot page hands to MemoryViz (add_local_files), and the view it opens"""
    m = re.search(r"const local_files = (\[.*?\])\s*\n", html)
    kind = re.search(r"add_local_files\(local_files, '([^']+)'\)", html)
    if not m or not kind:
        return None, None
    files = json.loads(m.group(1))
    raw = base64.b64decode(files[0]["base64"])
    return pickle.loads(raw), kind.group(1)


def run(snap, venv_py, workdir, path=None):
    os.makedirs(workdir, exist_ok=True)
    if path is None:
        path = os.path.join(workdir, "snapshot.pickle")
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=2)
    p = subprocess.run([venv_py, os.path.join(HERE, "memviz_cli.py"), path, workdir],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0:
        return None, [f"memviz_cli.py rc={p.returncode}: {p.stderr[-2000:]}"]
    return json.loads(p.stdout), []


def check(snap, venv_py, workdir, path=None):
    res, errors = run(snap, venv_py, workdir, path)
    if res is None:
        return errors
    for name, r in res.items():
        if not r["ok"]:
            errors.append(f"memory_viz {name} failed on the snapshot: {r['error'][-1500:]}")
    if errors:
        return errors
    segs = snap["segments"]
    # stats: the allocator's totals, as segsum adds them up (allocated = requested sizes)
    out = res["stats"]["stdout"]
    want = {"segments": str(len(segs)),
            "total_reserved": fmt_size(sum(s["total_size"] for s in segs)),
            "total_allocated": fmt_size(sum(b["requested_size"] for s in segs for b in s["blocks"]
                                            if b["state"] == "active_allocated"))}
    for k, v in want.items():
        if f"\n{k}: {v}\n" not in "\n" + out:
            errors.append(f"memory_viz stats: want '{k}: {v}', got: {out[:600]!r}")
    # trace: every event of every device, one statement each
    out = res["trace"]["stdout"]
    devs = [t for t in snap["device_traces"] if t]
    # (memory_viz ends a device's part with no newline: the next header follows on that line)
    heads = re.findall(r"Device (\d+) -+$", out, re.M)
    counts = [int(n) for n in re.findall(r"^(\d+) entries$", out, re.M)]
    if counts != [len(t) for t in devs] or len(heads) != len(devs):
        errors.append(f"memory_viz trace: entries {counts} for devices {heads}, "
                      f"the snapshot has {[len(t) for t in devs]}")
    acts = [e["action"] for t in devs for e in t]
    for act, pat in (("alloc", r"^\w+ = (seg_\d+|\w+|MEM)\[\d+:"), ("free_requested", r"^del "),
                     ("free_completed", r"^# free completed for "),
                     ("segment_alloc", r" = cudaMalloc\("), ("segment_free", r"^cudaFree\("),
                     ("oom", r"^raise OutOfMemoryError")):
        n = len(re.findall(pat, out, re.M))
        if n != acts.count(act):
            errors.append(f"memory_viz trace: {n} '{act}' statements, the snapshot has "
                          f"{acts.count(act)}")
    # filter_freed pairs every free with its alloc: an unpaired free is a broken trace
    if "free_completed without free_requested" in res["trace_plot_filter_freed"]["stdout"]:
        errors.append("memory_viz trace_plot -f: " +
                      res["trace_plot_filter_freed"]["stdout"][:600])
    # the plots: the page hands MemoryViz exactly the snapshot, opened at the asked view
    for name, view in (("trace_plot", "Active Memory Timeline"),
                       ("trace_plot_segments", "Active Cached Memory Timeline"),
                       ("segment_plot", "Allocator State History")):
        with open(res[name]["html"]) as f:
            doc, kind = plot_document(f.read())
        if kind != view:
            errors.append(f"memory_viz {name}: page opens {kind!r}, want {view!r}")
        if doc != snap:
            errors.append(f"memory_viz {name}: the page's snapshot differs from the file's")
    return errors
