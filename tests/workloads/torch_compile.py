"""A torch.compile'd CPU model (inductor) that graph-breaks and recompiles, driven from stdin,
for `--torch-logs` and `--torch-trace` (tests/e2e/test_torch2_compile.py).

torch_compile.py: prints "READY <pid>", then reads commands, one a line, polling stdin from
Python (so the main thread reaches the eval loop's safe points every few ms while it waits):
  "run N S"  calls the compiled step on a seeded N x 16 input with scale S (an int): the first
             call compiles; a new N recompiles (size guard), a new S recompiles (constant
             guard); the step breaks its graph once (torch._dynamo.graph_break()) so each call
             runs two graphs. Prints "RAN N S <sum of the output, 4 decimals>".
  "quit"     prints "DONE" and exits.
(Empty lines and "GO" are ignored.)
Deterministic output: the same commands print the same lines, traced or not."""
import os
import select
import sys

import torch

torch.manual_seed(0)
W1 = torch.randn(16, 32)
W2 = torch.randn(32, 8)


def step(x, scale):
	h = torch.relu(x @ W1) * scale
	torch._dynamo.graph_break()
	return torch.tanh(h @ W2) + scale


compiled = torch.compile(step, backend="inductor")


def main():
	print("READY", os.getpid(), flush=True)
	buf = b""
	while True:
		r, _, _ = select.select([0], [], [], 0.005)
		if not r:
			continue
		data = os.read(0, 4096)
		if not data:
			return
		buf += data
		while b"\n" in buf:
			line, buf = buf.split(b"\n", 1)
			cmd = line.decode().split()
			if cmd in ([], ["GO"]):
				continue
			if cmd == ["quit"]:
				print("DONE", flush=True)
				return
			n, s = int(cmd[1]), int(cmd[2])
			g = torch.Generator().manual_seed(n)
			out = compiled(torch.randn(n, 16, generator=g), s)
			print("RAN %d %d %.4f" % (n, s, out.sum().item()), flush=True)


main()
