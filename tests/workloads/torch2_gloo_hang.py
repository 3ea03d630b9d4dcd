"""A torch.distributed job on gloo (CPU) with PyTorch's own flight recorder on
(TORCH_FR_BUFFER_SIZE), one process per rank, that hangs because one rank skips a collective
(tests/e2e/test_torch2.py). Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
argv: DUMP_DIR CULPRIT STEPS [--no-subgroup]. After init prints "READY <pid>" and waits for a line; then runs
STEPS all_reduces (the culprit STEPS-1) on the default group and, on a second group of the
even ranks, one all_gather a step (not with --no-subgroup). Every rank but the culprit issues its last all_reduce with
async_op and prints "SENT" before it waits on it (so it is recorded when the line is out); the
culprit prints "SKIPPED". The next line on stdin makes the rank write PyTorch's own dump
(_dump_fr_trace, a pickle) to DUMP_DIR/rank_<RANK>, print "DUMPED" and exit."""
import datetime
import os
import sys
import threading

import torch
import torch.distributed as dist


def main(out, culprit, steps, subgroup):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=3600))
    evens = dist.new_group(list(range(0, world, 2))) if subgroup else None
    print("READY", os.getpid(), flush=True)
    sys.stdin.readline()
    # the next line is for the dump (one reader of stdin at a time)
    threading.Thread(target=dump_on_request, args=(out,), daemon=True).start()
    t = torch.ones(1024)
    for step in range(steps):
        if step == steps - 1:
            if rank == culprit:
                print("SKIPPED", flush=True)
                break
            work = dist.all_reduce(t, async_op=True)
            print("SENT", flush=True)
            work.wait()
            break
        dist.all_reduce(t)
        if evens is not None and rank % 2 == 0:
            dist.all_gather([torch.empty(8) for _ in range(0, world, 2)], torch.ones(8),
                            group=evens)
    threading.Event().wait()


def dump_on_request(out):
    sys.stdin.readline()
    # with C++ stack traces PyTorch symbolizes every frame first (addr2line: tens of seconds
    # on a loaded machine); the Python frames are what the analyzers show
    raw = torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False)
    with open(os.path.join(out, "rank_%s" % os.environ["RANK"]), "wb") as f:
        f.write(raw)
    print("DUMPED", flush=True)
    os._exit(0)


main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "--no-subgroup" not in sys.argv[4:])
