#!/usr/bin/python3
"""cohort's PyTorch peer for the main job's figure in `cohort bench
training`: asynchronous parameter-server training, as a PyTorch user writes
it with torch.distributed.rpc.

The training suite (bench/training) runs this in the same run as its own ps
job (examples/train/train_ps under `cohort launch`, bench/training/ps_job.h)
and divides its ps_examples_per_second by this script's (bench/common/peer.h,
PeerRunner and PrintRatio), so the model, the optimizer, the job's shape and
the way the figure is measured match cohort's:

  model      Linear(16, hidden) -> ReLU -> Linear(hidden, hidden) -> ReLU ->
             Linear(hidden, 4), cross-entropy on the logits, float32
             (hidden 1024: 1,071,108 parameters, examples/train/ps_model.h)
  optimizer  plain SGD, learning rate 0.1, applied on the ps
  data       a seeded synthetic set of 16,384 rows labelled by a random
             two-layer teacher (as cohort's data_parallel.h); each step takes
             `batch` rows at a random offset, each worker its own stream;
             held-out accuracy on another 4,096 rows at the end
  job        one ps process holding the model and W worker processes, over
             torch.distributed.rpc (TensorPipe, loopback). Each step a
             worker fetches the parameters (rpc_sync), computes the gradients
             of its batch, and pushes them (rpc_sync); the ps subtracts
             lr * gradient under a lock and counts the global step. Workers
             stop once the global step reaches --steps (cohort: StopAtStepHook
             on the global step), so W workers share the steps.
  threads    torch.set_num_threads(1) in every process

  ps_examples_per_second  examples/s  {workers, ps, parameters, batch}
      every worker's examples over the span common to all workers
      (peer_common.common_span, the same rule as cohort's
      CommonMeasuredSpan): each worker skips --warmup steps, the span runs
      from the end of the last worker's warm-up to the end of the first
      worker's last step, and the steps ending inside it count. Step times
      are the wall clock when the gradient push returned.
      The line also carries heldout_accuracy and global_step (the ps model
      at the end), measured_steps and span_seconds.

Output: one JSON object per line, {"suite": "torch_rpc_ps", "metric",
"params", "value", "unit", "rep"}; a failed job prints {"suite":
"torch_rpc_ps", "error": ..., "workers": W, "rep": r} and the script exits 1.
Only processes it forked are signalled.

  /usr/bin/python3 torch_rpc_ps_peer.py [--workers 1,2] [--reps 3]
      [--steps 1000] [--warmup 10] [--batch 64] [--hidden 1024]
      [--deadline 300]
"""

import argparse
import json
import math
import os
import sys
import threading
import time

# Before torch loads: one intra-op thread per process.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402

from peer_common import (common_span, int_list, kill_forked_on_sigterm,  # noqa: E402
                         run_group)

SUITE = "torch_rpc_ps"
FEATURES = 16
CLASSES = 4
LEARNING_RATE = 0.1
WEIGHT_SEED = 99
DATA_SEED = 1234
TEACHER_HIDDEN = 16
TRAIN_EXAMPLES = 16384
HELDOUT_EXAMPLES = 4096
# Requests the ps serves at once: enough for every worker's fetch or push.
RPC_THREADS = 4


def parameters(hidden):
    return (FEATURES * hidden + hidden + hidden * hidden + hidden +
            hidden * CLASSES + CLASSES)


def build_model(hidden):
    """The same seed in every process: the workers' copies start equal to
    the ps's (they are overwritten by the first fetch anyway)."""
    torch.manual_seed(WEIGHT_SEED)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, CLASSES))


def synthetic_data():
    """(train x, train labels, held-out x, held-out labels): rows of N(0, 1)
    labelled by the argmax of a random ReLU teacher, the same in every
    process."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    t1 = torch.randn(FEATURES, TEACHER_HIDDEN, generator=gen)
    t2 = torch.randn(TEACHER_HIDDEN, CLASSES, generator=gen)

    def rows(n):
        x = torch.randn(n, FEATURES, generator=gen)
        return x, torch.argmax(torch.relu(x @ t1) @ t2, dim=1)

    train_x, train_y = rows(TRAIN_EXAMPLES)
    heldout_x, heldout_y = rows(HELDOUT_EXAMPLES)
    return train_x, train_y, heldout_x, heldout_y


class ParameterServer:
    """The model's only authoritative copy; workers read it and push
    gradients. The lock makes each update whole (a reader may still see one
    half applied, as TensorFlow's async PS workers may)."""

    def __init__(self, hidden):
        self.model = build_model(hidden)
        self.lock = threading.Lock()
        self.global_step = 0

    def parameters(self):
        return [p.detach() for p in self.model.parameters()]

    def apply(self, grads):
        with self.lock:
            with torch.no_grad():
                for p, g in zip(self.model.parameters(), grads):
                    p.add_(g, alpha=-LEARNING_RATE)
            self.global_step += 1
            return self.global_step


_ps = None  # the ps process's ParameterServer


def ps_parameters():
    return _ps.parameters()


def ps_apply(grads):
    return _ps.apply(grads)


def run_ps(rank, world, backend, opts):
    global _ps
    _ps = ParameterServer(opts.hidden)
    rpc.init_rpc("ps", rank=rank, world_size=world,
                 rpc_backend_options=backend)
    rpc.shutdown()  # returns once every worker has shut down too
    _, _, heldout_x, heldout_y = synthetic_data()
    with torch.no_grad():
        logits = _ps.model(heldout_x)
    accuracy = float((torch.argmax(logits, dim=1) == heldout_y).float().mean())
    return [{"role": "ps", "heldout_accuracy": round(accuracy, 4),
             "global_step": _ps.global_step}]


def run_worker(rank, world, backend, opts):
    task = "worker:%d" % (rank - 1)
    rpc.init_rpc("worker%d" % (rank - 1), rank=rank, world_size=world,
                 rpc_backend_options=backend)
    model = build_model(opts.hidden)
    loss_fn = torch.nn.CrossEntropyLoss()
    train_x, train_y, _, _ = synthetic_data()
    # Each worker its own stream of batches (cohort: seed 1000 + replica).
    gen = torch.Generator().manual_seed(1000 + rank - 1)
    times = []
    global_step, loss = 0, None
    while global_step < opts.steps:
        fetched = rpc.rpc_sync("ps", ps_parameters)
        with torch.no_grad():
            for p, v in zip(model.parameters(), fetched):
                p.copy_(v)
        offset = int(torch.randint(0, TRAIN_EXAMPLES - opts.batch + 1, (1,),
                                   generator=gen))
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(train_x[offset:offset + opts.batch]),
                       train_y[offset:offset + opts.batch])
        loss.backward()
        global_step = rpc.rpc_sync(
            "ps", ps_apply, args=([p.grad for p in model.parameters()],))
        times.append(int(time.time() * 1e6))
    rpc.shutdown()
    if loss is not None and not math.isfinite(float(loss)):
        raise RuntimeError("%s's last loss is %r" % (task, float(loss)))
    return [{"role": "worker", "task": task, "step_end_unix_us": times}]


def rank_main(rank, world, port, opts):
    """Rank 0 is the ps, ranks 1..W the workers."""
    torch.set_num_threads(1)
    backend = rpc.TensorPipeRpcBackendOptions(
        init_method="tcp://127.0.0.1:%d" % port,
        num_worker_threads=RPC_THREADS, rpc_timeout=opts.deadline)
    if rank == 0:
        return run_ps(rank, world, backend, opts)
    return run_worker(rank, world, backend, opts)


def measure(lines, workers, opts):
    """The measurement line of one job from its ranks' lines."""
    ps = [line for line in lines if line.get("role") == "ps"]
    logs = sorted((line for line in lines if line.get("role") == "worker"),
                  key=lambda line: line["task"])
    if len(ps) != 1 or len(logs) != workers:
        raise ValueError("the job returned %d ps and %d worker result(s), "
                         "expected 1 and %d" % (len(ps), len(logs), workers))
    rate, steps, seconds = common_span(
        [(w["task"], w["step_end_unix_us"], opts.batch) for w in logs],
        opts.warmup)
    return {
        "suite": SUITE, "metric": "ps_examples_per_second",
        "params": {"workers": workers, "ps": 1,
                   "parameters": parameters(opts.hidden),
                   "batch": opts.batch},
        "value": round(rate, 1), "unit": "examples/s",
        "heldout_accuracy": ps[0]["heldout_accuracy"],
        "global_step": ps[0]["global_step"], "measured_steps": steps,
        "span_seconds": round(seconds, 3), "warmup_steps": opts.warmup,
        "torch": torch.__version__}


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int_list, default=[1, 2])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000,
                        help="the job's last global step")
    parser.add_argument("--warmup", type=int, default=10,
                        help="steps of each worker not measured")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--deadline", type=float, default=300.0,
                        help="seconds one job may take")
    opts = parser.parse_args()
    if min([opts.reps, opts.steps, opts.warmup, opts.batch, opts.hidden] +
           opts.workers) < 1:
        parser.error("every count must be positive")
    if opts.batch > TRAIN_EXAMPLES:
        parser.error("--batch must be at most %d" % TRAIN_EXAMPLES)
    kill_forked_on_sigterm()
    status = 0
    for rep in range(opts.reps):
        for workers in opts.workers:
            lines, error = run_group(rank_main, workers + 1, rep, opts)
            if error is None:
                try:
                    line = measure(lines, workers, opts)
                    line["rep"] = rep
                    print(json.dumps(line), flush=True)
                except ValueError as e:
                    error = str(e)
            if error is not None:
                print(json.dumps({"suite": SUITE, "error": error,
                                  "workers": workers, "rep": rep}),
                      flush=True)
                status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
