"""Run PyTorch's own memory_viz command line (`python -m torch.cuda._memory_viz`) on a snapshot,
in the test venv's interpreter (torch 2.x). Each subcommand runs through the module's real
__main__ (runpy), in one process so torch is imported once. Prints one JSON object:
{subcommand: {"ok": bool, "stdout": str, "error": str, "html": str}}.

Usage: python memviz_cli.py SNAPSHOT.pickle OUTDIR
`segments` and `memory` (flamegraphs) are left out: they download flamegraph.pl at run time."""
import contextlib
import io
import json
import os
import runpy
import sys
import traceback

RUNS = [
    ("stats", []),
    ("trace", []),
    ("trace_plot", ["-o", "{out}/trace_plot.html"]),
    ("trace_plot_segments", ["-s", "-o", "{out}/trace_plot_segments.html"]),
    ("trace_plot_filter_freed", ["-f", "-o", "{out}/trace_plot_filter_freed.html"]),
    ("segment_plot", ["-o", "{out}/segment_plot.html"]),
]


def main():
    snap, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    res = {}
    for name, extra in RUNS:
        cmd = name.split("_segments")[0].split("_filter_freed")[0]
        sys.argv = ["_memory_viz", cmd, snap] + [a.format(out=out) for a in extra]
        buf, r = io.StringIO(), {"ok": True, "error": ""}
        try:
            with contextlib.redirect_stdout(buf):
                runpy.run_module("torch.cuda._memory_viz", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            r["ok"] = not e.code
            r["error"] = f"exit {e.code}"
        except BaseException:  # any failure of the client on our file is the finding
            r["ok"] = False
            r["error"] = traceback.format_exc()
        r["stdout"] = buf.getvalue()
        html = [a.format(out=out) for a in extra if a.endswith(".html")]
        r["html"] = html[0] if html else ""
        res[name] = r
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
