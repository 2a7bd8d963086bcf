#!/usr/bin/python3
"""cohort's PyTorch peer for `cohort bench training`: the same synchronous
data-parallel training, as a PyTorch user writes it.

The training suite (bench/training) runs this in the same run as its own
gangs and divides its examples/s by this script's (bench/common/peer.h,
PeerRunner and PrintRatio), so the model, the data sizes, the optimizer and
the way the figure is timed match cohort's (training/data_parallel.cc):

  model      Linear(features, hidden) -> ReLU -> Linear(hidden, classes),
             cross-entropy on the logits, float32
  optimizer  SGD with momentum 0.9, learning rate 0.01
  data       a seeded synthetic set of batch * 8 rows, labels from a random
             linear teacher; rank r trains on rows r, r + N, ...; each step
             takes the next `batch` rows of its shard, wrapping around
  tasks      1: the plain model in one process (what a user runs on one
             core); N > 1: N forked processes, the model wrapped in
             DistributedDataParallel on gloo (loopback), which all-reduces
             (averages) the gradients during backward
  threads    torch.set_num_threads(1) in every process, as cohort's tasks run
             one session thread and one OpenBLAS thread

  examples_per_second  examples/s  {tasks, parameters, batch}
      rank 0's wall time of `steps` steps (forward, backward, update), with
      no warm-up (cohort times its steps the same way):
      steps * batch * tasks / seconds

Every run checks that the final loss is finite. Output: one JSON object per
line, {"suite": "torch_ddp", "metric", "params", "value", "unit", "rep"};
a failed group prints {"suite": "torch_ddp", "error": ..., "tasks": N,
"rep": r} and the script exits 1. Only processes it forked are signalled.

  /usr/bin/python3 torch_ddp_peer.py [--tasks 1,2] [--reps 3] [--steps 60]
      [--batch 256] [--features 512] [--hidden 2048] [--deadline 300]
"""

import argparse
import datetime
import json
import math
import os
import sys
import time

# Before torch loads: gloo binds the loopback interface, one intra-op thread.
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from peer_common import int_list, kill_forked_on_sigterm, run_group  # noqa: E402

SUITE = "torch_ddp"
CLASSES = 4
LEARNING_RATE = 0.01
MOMENTUM = 0.9
DATA_SEED = 1234


def parameters(opts):
    return (opts.features * opts.hidden + opts.hidden +
            opts.hidden * CLASSES + CLASSES)


def shard(rank, world, opts):
    """This rank's rows of the seeded synthetic set."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    rows = opts.batch * 8
    x = torch.randn(rows, opts.features, generator=gen)
    teacher = torch.randn(opts.features, CLASSES, generator=gen)
    labels = torch.argmax(x @ teacher, dim=1)
    return x[rank::world].contiguous(), labels[rank::world].contiguous()


def rank_main(rank, world, port, opts):
    """One task; returns its lines (rank 0's line is kept)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(opts.features, opts.hidden), torch.nn.ReLU(),
        torch.nn.Linear(opts.hidden, CLASSES))
    if world > 1:
        dist.init_process_group(
            "gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=opts.deadline))
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE,
                                momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, labels = shard(rank, world, opts)
    if x.shape[0] < opts.batch:
        raise ValueError("a shard of %d rows cannot hold a batch of %d" %
                         (x.shape[0], opts.batch))
    if world > 1:
        dist.barrier()  # every rank ready: the clock starts together
    offset = 0
    started = time.perf_counter()
    for _ in range(opts.steps):
        if offset + opts.batch > x.shape[0]:
            offset = 0
        xb = x[offset:offset + opts.batch]
        yb = labels[offset:offset + opts.batch]
        offset += opts.batch
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - started
    final = float(loss.item())
    if not math.isfinite(final):
        raise RuntimeError("the final loss is %r" % final)
    lines = []
    if rank == 0:
        lines.append({
            "suite": SUITE, "metric": "examples_per_second",
            "params": {"tasks": world, "parameters": parameters(opts),
                       "batch": opts.batch},
            "value": round(opts.steps * opts.batch * world / seconds, 1),
            "unit": "examples/s", "final_loss": round(final, 4),
            "torch": torch.__version__})
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return lines


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int_list, default=[1, 2])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--deadline", type=float, default=300.0,
                        help="seconds one group may take")
    opts = parser.parse_args()
    if min([opts.reps, opts.steps, opts.batch, opts.features, opts.hidden] +
           opts.tasks) < 1:
        parser.error("every count must be positive")
    kill_forked_on_sigterm()
    status = 0
    for rep in range(opts.reps):
        for world in opts.tasks:
            lines, error = run_group(rank_main, world, rep, opts)
            for line in lines:
                print(json.dumps(line), flush=True)
            if error is not None:
                print(json.dumps({"suite": SUITE, "error": error,
                                  "tasks": world, "rep": rep}), flush=True)
                status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
