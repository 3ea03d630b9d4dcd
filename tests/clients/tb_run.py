"""TensorBoard's PyTorch Profiler plugin (torch-tb-profiler, the test venv's) on a log
directory of tptrace traces (*.pt.trace.json): each worker's file goes through the plugin's own
parse and run generator (what its RunLoader runs in a subprocess per file, here in-process so a
failure is an error, not a log line), then the overview, operator and kernel views are read as
the HTTP API would serve them. Prints one JSON object per worker:
  {worker: {"views": [...], "overview": {...}, "operators": [{name, calls, host_total_us}],
            "kernels": [{name, calls, total_us}], "error": str}}
Usage: python tb_run.py LOGDIR"""
import json
import os
import sys
import tempfile
import traceback


def rows(table):
    """the plugin's table ({"columns": [...], "rows": [[...]]} or {"data": ...}) as dicts"""
    data = table.get("data", table) if isinstance(table, dict) else table
    cols = [c["name"] for c in data["columns"]]
    return [dict(zip(cols, r)) for r in data["rows"]]


def main():
    from torch_tb_profiler import consts
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    logdir, out = sys.argv[1], {}
    cache = tempfile.mkdtemp()
    for f in sorted(os.listdir(logdir)):
        m = consts.WORKER_PATTERN.match(f)
        if not m:
            continue
        worker, r = m.group(1), {"error": ""}
        out[worker] = r
        try:
            data = RunProfileData.parse(worker, None, os.path.join(logdir, f), cache)
            prof = RunGenerator(worker, None, data).generate_run_profile()
            r["views"] = [v.display_name for v in prof.views]
            r["overview"] = prof.overview
            r["has_kernel"] = prof.has_kernel
            if prof.operation_table_by_name is not None:
                r["operators"] = prof.operation_table_by_name["data"]
            if prof.kernel_table is not None:
                r["kernels"] = rows(prof.kernel_table)
        except Exception:  # the plugin failing on our file is the finding
            r["error"] = traceback.format_exc()
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
