#!/usr/bin/python3
"""cohort's gloo peer: torch.distributed on the gloo backend, loopback only.

The barrier and collective suites (bench/barrier, bench/collective) run this
in the same run as their own gangs and divide their medians by its medians
(bench/common/peer.h, PeerRunner and PrintRatio), so the metric names, the
params and the way each figure is timed match theirs:

  barrier_p50/p99            us   {world}           dist.barrier()
  all_gather_object_p50/p99  us   {world, bytes}    dist.all_gather_object of
                                                    a 64-character str (torch
                                                    pickles it and runs two
                                                    collectives)
  all_gather_p50/p99         us   {world, bytes}    dist.all_gather of a
                                                    16-element float32 tensor
                                                    (64 bytes), one collective
  allreduce_time_p50         ms   {MiB, world}      dist.all_reduce (SUM) of a
                                                    float32 tensor of MiB MiB
  allreduce_busbw            GB/s {MiB, world}      algbw * 2(N-1)/N, with
                                                    algbw = bytes / p50 time
  init_process_group         ms   {world}           rank 0's wall time of
                                                    init_process_group

Each repetition of each world size is a fresh group of N forked processes
(torch.set_num_threads(1), GLOO_SOCKET_IFNAME=lo, a tcp:// rendezvous on a
port the OS picked). A timed loop runs its warm-up, one dist.barrier() to
line the ranks up, then times every iteration on rank 0 with
time.perf_counter_ns; p50/p99 are the nearest rank on n - 1 of those
iterations (bench/common/peer.h's Percentile). The all-reduce runs 2
warm-ups and 50 timed iterations below 16 MiB, 6 from 16 MiB up, as
collective_bench.cc does, and every rank checks the sum (world^k after k
all-reduces of ones).

Output: one JSON object per line on stdout,
  {"suite": "gloo", "metric": ..., "params": {...}, "value": ..., "unit": ...,
   "rep": r}
and, when a rank fails or a group overruns --deadline, a line
{"suite": "gloo", "error": "...", "world": N, "rep": r} and exit status 1
(the failing rank's traceback goes to stderr). Only processes this script forked are signalled, by pid.

  /usr/bin/python3 gloo_peer.py [--world-sizes 2,4] [--reps 3]
      [--measure barrier,all_gather_object,all_gather,allreduce,init]
      [--iters 300] [--gather-iters 200] [--mib 1,64] [--deadline 60]
      [--rank R --master HOST:PORT]   (one rank per lab host; rank 0 prints)
"""
import argparse
import datetime
import json
import os
import sys
import time

# Before torch loads: gloo binds the loopback interface, and one intra-op
# thread per rank, as cohort's tasks run.
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from peer_common import (  # noqa: E402
    int_list, kill_forked_on_sigterm, percentile, run_group)

SUITE = "gloo"
MIB = 1 << 20
ALL_MEASURES = ("barrier", "all_gather_object", "all_gather", "allreduce",
                "init")


def iterations_for(mib):
    return 6 if mib >= 16 else 50


def time_iterations(op, warmup, iters):
    """Per-iteration nanoseconds of `op` after `warmup` untimed calls."""
    for _ in range(warmup):
        op()
    dist.barrier()
    clock = time.perf_counter_ns
    times = []
    for _ in range(iters):
        start = clock()
        op()
        times.append(clock() - start)
    return times


def rank_main(rank, world, port, opts, host="127.0.0.1"):
    """One member of the group; returns its lines (rank 0's are kept)."""
    lines = []

    def record(metric, params, value, unit, **extra):
        params = dict(params, world=world)
        line = {"suite": SUITE, "metric": metric, "params": params,
                "value": round(value, 3), "unit": unit}
        line.update(extra)
        lines.append(line)

    torch.set_num_threads(1)
    started = time.monotonic()
    dist.init_process_group(
        "gloo", init_method="tcp://%s:%d" % (host, port), rank=rank,
        world_size=world, timeout=datetime.timedelta(seconds=opts.deadline))
    init_ms = (time.monotonic() - started) * 1e3
    measure = set(opts.measure)
    if "init" in measure:
        record("init_process_group", {}, init_ms, "ms")
    if "barrier" in measure:
        ns = time_iterations(dist.barrier, 20, opts.iters)
        for p in (50, 99):
            record("barrier_p%d" % p, {}, percentile(ns, p) / 1e3, "us")
    if "all_gather_object" in measure:
        mine = ("%d" % rank).rjust(64, "o")  # a 64-character str
        out = [None] * world
        ns = time_iterations(lambda: dist.all_gather_object(out, mine), 10,
                             opts.gather_iters)
        want = [("%d" % r).rjust(64, "o") for r in range(world)]
        if out != want:
            raise RuntimeError("all_gather_object gathered %r" % out)
        for p in (50, 99):
            record("all_gather_object_p%d" % p, {"bytes": 64},
                   percentile(ns, p) / 1e3, "us")
    if "all_gather" in measure:
        mine = torch.full((16,), float(rank), dtype=torch.float32)
        out = [torch.empty(16, dtype=torch.float32) for _ in range(world)]
        ns = time_iterations(lambda: dist.all_gather(out, mine), 20,
                             opts.iters)
        for r, t in enumerate(out):
            if not bool((t == float(r)).all()):
                raise RuntimeError("all_gather: rank %d's slot is %r" %
                                   (r, t[:4].tolist()))
        for p in (50, 99):
            record("all_gather_p%d" % p, {"bytes": 64},
                   percentile(ns, p) / 1e3, "us")
    if "allreduce" in measure:
        for mib in opts.mib:
            data = torch.ones(mib * MIB // 4, dtype=torch.float32)
            warmup, iters = 2, iterations_for(mib)
            ns = time_iterations(lambda: dist.all_reduce(data), warmup,
                                 iters)
            want = float(world) ** (warmup + iters)
            if not bool(torch.isclose(data, torch.tensor(want),
                                      rtol=1e-5).all()):
                raise RuntimeError(
                    "all_reduce of %d MiB: %r where %r is due" %
                    (mib, data[0].item(), want))
            seconds = percentile(ns, 50) / 1e9
            algbw = mib * MIB / seconds / 1e9
            record("allreduce_time_p50", {"MiB": mib}, seconds * 1e3, "ms")
            record("allreduce_busbw", {"MiB": mib},
                   algbw * 2 * (world - 1) / world, "GB/s",
                   algbw=round(algbw, 3))
    dist.barrier()
    dist.destroy_process_group()
    return lines if rank == 0 else []


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", type=int_list, default=[2, 4])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--measure", default=",".join(ALL_MEASURES))
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--gather-iters", type=int, default=200)
    parser.add_argument("--mib", type=int_list, default=[1, 64])
    parser.add_argument("--deadline", type=float, default=60.0,
                        help="seconds one group may take")
    parser.add_argument("--rank", type=int, default=None,
                        help="run only this rank of one group of "
                        "--world-sizes (one value) ranks, meeting at "
                        "--master: one process per host of the multi-host "
                        "lab, GLOO_SOCKET_IFNAME=eth0")
    parser.add_argument("--master", default=None,
                        help="HOST:PORT of rank 0's rendezvous (with --rank)")
    opts = parser.parse_args()
    opts.measure = [m for m in opts.measure.split(",") if m]
    unknown = sorted(set(opts.measure) - set(ALL_MEASURES))
    if unknown:
        parser.error("unknown --measure %s (known: %s)" %
                     (",".join(unknown), ",".join(ALL_MEASURES)))
    if opts.iters < 1 or opts.gather_iters < 1 or opts.reps < 1:
        parser.error("--iters, --gather-iters and --reps must be positive")
    if opts.rank is not None:
        if len(opts.world_sizes) != 1 or opts.master is None or \
                not 0 <= opts.rank < opts.world_sizes[0]:
            parser.error("--rank needs one --world-sizes value above it "
                         "and --master HOST:PORT")
        host, port = opts.master.rsplit(":", 1)
        for line in rank_main(opts.rank, opts.world_sizes[0], int(port),
                              opts, host):
            print(json.dumps(line), flush=True)
        return
    kill_forked_on_sigterm()
    status = 0
    for world in opts.world_sizes:
        for rep in range(opts.reps):
            lines, error = run_group(rank_main, world, rep, opts)
            for line in lines:
                print(json.dumps(line), flush=True)
            if error is not None:
                line = json.dumps({"suite": SUITE, "error": error,
                                   "world": world, "rep": rep})
                print(line, flush=True)
                status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
