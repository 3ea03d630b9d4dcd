"""Holistic Trace Analysis (the test venv's holistictraceanalysis) on a directory of tptrace
--gpu traces, one per rank. Runs the analyses HTA users run first and prints one JSON object
with their numbers, for tests/e2e/test_clients_hta.py to hold against `tptrace report`:
  temporal: {rank: {idle_ns, compute_ns, non_compute_ns, kernel_ns}}   (get_temporal_breakdown)
  idle: {rank: {stream: {category: ns}}}                              (get_idle_time_breakdown)
  kernels: {rank: {name: {count, total_ns}}}, kernel_types: {type: ns} (get_gpu_kernel_breakdown)
  overlap: {rank: percent}                                            (get_comm_comp_overlap)
  launch: {rank: {count, gpu_shorter, runtime_outliers, delay_outliers}} (get_cuda_kernel_launch_stats)
HTA's time columns are in microseconds in 0.5.0's dataframes; each is converted here as read.
Usage: python hta_run.py TRACE_DIR"""
import json
import logging
import sys
import warnings


def main():
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=sys.argv[1])
    ranks = sorted(ta.t.traces.keys())
    out = {"ranks": ranks}

    tb = ta.get_temporal_breakdown(visualize=False)
    out["temporal_columns"] = list(tb.columns)
    out["temporal"] = {int(r["rank"]): {k: float(r[k]) for k in tb.columns if k != "rank"}
                       for _, r in tb.iterrows()}

    idle, _ = ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
    out["idle_columns"] = list(idle.columns)
    out["idle"] = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                   for _, r in idle.iterrows()]

    types, kern = ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=1000,
                                              duration_ratio=1.0)
    out["kernel_types"] = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                           for _, r in types.iterrows()]
    out["kernels"] = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                      for _, r in kern.iterrows()]

    ov = ta.get_comm_comp_overlap(visualize=False)
    out["overlap"] = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                      for _, r in ov.iterrows()]

    ls = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    out["launch"] = {int(r): {"count": len(df), "columns": list(df.columns),
                              "rows": [{k: (v.item() if hasattr(v, "item") else v)
                                        for k, v in row.items()} for _, row in df.iterrows()]}
                     for r, df in ls.items()}
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
