"""A torch.distributed job on gloo (CPU), one process per rank, for `tptrace fr --torch-dump`
(tests/e2e/test_torch2_instr.py).

torch_gloo.py RANK WORLD PORT COUNT: init_process_group("gloo") at 127.0.0.1:PORT, COUNT
all_reduce calls of a 4-element tensor (rank + 1), prints "READY <pid>" and "SUM <value>" (the
last result), then polls stdin from Python (the main thread reaches safe points every few ms)
until "quit", then a barrier, destroy_process_group, "DONE". PyTorch's flight recorder is on
where the environment says so (TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE)."""
import os
import select
import sys

import torch
import torch.distributed as dist


def main(rank, world, port, count):
	dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
				world_size=world)
	t = torch.ones(4)
	for _ in range(count):
		t = torch.full((4,), float(rank + 1))
		dist.all_reduce(t)
	print("READY", os.getpid(), flush=True)
	print("SUM %.1f" % t[0].item(), flush=True)
	buf = b""
	while b"quit" not in buf:
		r, _, _ = select.select([0], [], [], 0.005)
		if r:
			data = os.read(0, 4096)
			if not data:
				break
			buf += data
	dist.barrier()
	dist.destroy_process_group()
	print("DONE", flush=True)


main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
