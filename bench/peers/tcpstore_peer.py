#!/usr/bin/python3
"""cohort's TCPStore peer: torch.distributed.TCPStore, loopback only.

The coord suite (bench/coord) runs this in the same run as its own
measurements and divides its medians by these (bench/common/peer.h), so the
metric names, params and timing rules are the suite's (coord_bench.h):

  rtt_{set,get,add}_p50/p99, rtt_setget_pair_p50   us  {clients: 1,
      value_bytes: 64, iters}: one client, 500 untimed set+get pairs, then
      --rtt-iters rounds of set(64 B), get and add(1), each timed with
      time.perf_counter_ns. In torch 1.13 set returns without a reply and
      get is two round trips (it waits for the key first); add is one.
  throughput   ops/s  {clients, client_mode, op_mix, seconds}: every client
      sets its own key once, waits at a start barrier, then alternates
      set(own key, 64 B) and get(own key) for --tp-seconds; value = all
      operations / (last client's end - first client's start), on
      CLOCK_MONOTONIC, which processes share.
  barrier_release_p50/p99, barrier_cycle_p50   us  {clients, client_mode,
      barrier, rounds}: after a start barrier, N clients pass back-to-back
      store barriers, a fresh key per round:
        barrier=torch  add(key, 1), then poll add(key, 0) with a 10 ms sleep
                       until it reads N (torch 1.13's store-based barrier)
        barrier=wait   the client whose add(key, 1) returns N sets key/done;
                       the others block in wait([key/done])
      release = last arrival -> last departure of a round; cycle = between
      the last departures of consecutive rounds; the first min(2, rounds/4)
      rounds are dropped (start-up skew).
  connect_p50 / connect_max   us  {clients, client_mode}: constructing one
      client TCPStore (connect + handshake), from the barrier runs.

The store's server is a forked process of its own; clients are forked
processes (--client-mode processes) or threads of this process (threads;
the binding releases the GIL inside store calls).

Output: one JSON object per line on stdout,
  {"suite": "tcpstore", "metric": ..., "params": {...}, "value": ...,
   "unit": ..., "rep": r}
and for a failed measurement {"suite": "tcpstore", "error": "...", ...}
with exit status 1. Every phase has a deadline; only processes this script
forked are signalled, by pid.

  /usr/bin/python3 tcpstore_peer.py [--reps 3] [--only rtt,throughput,barrier]
      [--client-mode processes|threads] [--rtt-iters 5000]
      [--tp-clients 8,64] [--tp-seconds 3] [--barrier-clients 2,8,32,128]
      [--barrier-modes torch,wait] [--barrier-rounds N]
"""
import argparse
import datetime
import json
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time

import torch.distributed as dist

from peer_common import int_list, percentile

SUITE = "tcpstore"
HOST = "127.0.0.1"
STORE_TIMEOUT = datetime.timedelta(seconds=30)
VALUE = b"v" * 64
_forked = []  # processes this script started, signalled by pid only


class PhaseError(Exception):
    """A measurement that failed; main prints it as an error line."""


def emit(metric, params, value, unit, rep, **extra):
    line = {"suite": SUITE, "metric": metric, "params": params,
            "value": round(value, 3), "unit": unit, "rep": rep}
    line.update(extra)
    print(json.dumps(line), flush=True)


def connect(port):
    return dist.TCPStore(HOST, port, None, False, STORE_TIMEOUT,
                         wait_for_workers=False)


def reap(procs, deadline):
    for proc in procs:
        proc.join(timeout=max(0.1, deadline - time.monotonic()))
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
        if proc in _forked:
            _forked.remove(proc)


def serve(port_out, stop):
    store = dist.TCPStore(HOST, 0, None, True, STORE_TIMEOUT,
                          wait_for_workers=False)
    port_out.put(store.port)
    stop.wait(3600)


class StoreServer:
    """The store's server in a forked process; .port is where it listens."""

    def __enter__(self):
        ctx = multiprocessing.get_context("fork")
        ports = ctx.Queue()
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=serve, args=(ports, self._stop),
                                 daemon=True)
        self._proc.start()
        _forked.append(self._proc)
        try:
            self.port = ports.get(timeout=30)
        except queue.Empty:
            self.__exit__()
            raise PhaseError("the TCPStore server did not start in 30 s")
        return self

    def __exit__(self, *unused):
        self._stop.set()
        reap([self._proc], time.monotonic() + 5)


def run_clients(n, mode, body, args, deadline_s):
    """Runs body(index, n, start_barrier, *args) in n clients; returns their
    results in index order. A client's exception becomes a PhaseError."""
    deadline = time.monotonic() + deadline_s
    if mode == "threads":
        results = queue.Queue()
        start = threading.Barrier(n)

        def thread_main(i):
            try:
                results.put((i, True, body(i, n, start, *args)))
            except Exception as e:
                results.put((i, False, "%s: %s" % (type(e).__name__, e)))

        threads = [threading.Thread(target=thread_main, args=(i,), daemon=True)
                   for i in range(n)]
        for t in threads:
            t.start()
        got = []
        try:
            for _ in range(n):
                got.append(results.get(
                    timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            raise PhaseError("%d of %d client threads did not finish in %g s"
                             % (n - len(got), n, deadline_s))
    else:
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        start = ctx.Barrier(n)

        def process_main(i):
            try:
                results.put((i, True, body(i, n, start, *args)))
            except Exception as e:
                results.put((i, False, "%s: %s" % (type(e).__name__, e)))

        procs = [ctx.Process(target=process_main, args=(i,), daemon=True)
                 for i in range(n)]
        for p in procs:
            p.start()
            _forked.append(p)
        got = []
        try:
            for _ in range(n):
                got.append(results.get(
                    timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            raise PhaseError("%d of %d client processes did not finish in "
                             "%g s" % (n - len(got), n, deadline_s))
        finally:
            reap(procs, deadline)
    failed = [g for g in got if not g[1]]
    if failed:
        raise PhaseError("client %d of %d: %s" % (failed[0][0], n,
                                                  failed[0][2]))
    return [g[2] for g in sorted(got, key=lambda g: g[0])]


def measure_rtt(port, iters, rep):
    store = connect(port)
    for _ in range(500):
        store.set("rtt", VALUE)
        store.get("rtt")
    clock = time.perf_counter_ns
    set_ns, get_ns, add_ns = [], [], []
    for _ in range(iters):
        t0 = clock()
        store.set("rtt", VALUE)
        t1 = clock()
        store.get("rtt")
        t2 = clock()
        store.add("rtt/count", 1)
        t3 = clock()
        set_ns.append(t1 - t0)
        get_ns.append(t2 - t1)
        add_ns.append(t3 - t2)
    params = {"clients": 1, "value_bytes": 64, "iters": iters}
    for name, ns in (("set", set_ns), ("get", get_ns), ("add", add_ns)):
        for p in (50, 99):
            emit("rtt_%s_p%d" % (name, p), params, percentile(ns, p) / 1e3,
                 "us", rep)
    emit("rtt_setget_pair_p50", params,
         percentile([a + b for a, b in zip(set_ns, get_ns)], 50) / 1e3, "us",
         rep, note="set then get, summed per iteration")


def throughput_client(i, n, start, port, seconds):
    store = connect(port)
    key = "tp/%d" % i
    store.set(key, VALUE)
    start.wait(timeout=60)
    began = time.monotonic()
    until = began + seconds
    ops = 0
    while True:
        store.set(key, VALUE)
        store.get(key)
        ops += 2
        if ops % 16 == 0 and time.monotonic() >= until:
            break
    return began, time.monotonic(), ops


def measure_throughput(port, n, mode, seconds, rep):
    runs = run_clients(n, mode, throughput_client, (port, seconds),
                       seconds + 60)
    span = max(r[1] for r in runs) - min(r[0] for r in runs)
    ops = sum(r[2] for r in runs)
    emit("throughput",
         {"clients": n, "client_mode": mode,
          "op_mix": "set64+get alternating", "seconds": seconds},
         ops / span, "ops/s", rep, per_client_ops_s=round(ops / span / n, 1))


def barrier_client(i, n, start, port, rounds, variant, prefix):
    began = time.monotonic_ns()
    store = connect(port)
    connect_ns = time.monotonic_ns() - began
    start.wait(timeout=120)
    arrive, leave = [], []
    for r in range(rounds):
        key = "%s/%d" % (prefix, r)
        arrive.append(time.monotonic_ns())
        if variant == "torch":
            store.add(key, 1)
            while store.add(key, 0) != n:
                time.sleep(0.01)
        elif store.add(key, 1) == n:
            store.set(key + "/done", b"1")
        else:
            store.wait([key + "/done"])
        leave.append(time.monotonic_ns())
    return connect_ns, arrive, leave


def default_rounds(variant, n):
    return 30 if variant == "torch" else max(20, min(300, 3000 // n))


def measure_barrier(port, n, variant, mode, rounds, rep):
    prefix = "barrier/%s/%d/%d/%d" % (variant, n, rep, time.monotonic_ns())
    runs = run_clients(n, mode, barrier_client,
                       (port, rounds, variant, prefix), 110)
    release, cycle = [], []
    previous = None
    for r in range(rounds):
        last_in = max(run[1][r] for run in runs)
        last_out = max(run[2][r] for run in runs)
        release.append(last_out - last_in)
        if previous is not None:
            cycle.append(last_out - previous)
        previous = last_out
    skip = min(2, rounds // 4)
    release, cycle = release[skip:], cycle[skip:]
    params = {"clients": n, "client_mode": mode, "barrier": variant,
              "rounds": rounds}
    emit("barrier_release_p50", params, percentile(release, 50) / 1e3, "us",
         rep, note="last arrival -> last departure")
    emit("barrier_release_p99", params, percentile(release, 99) / 1e3, "us",
         rep)
    emit("barrier_cycle_p50", params, percentile(cycle, 50) / 1e3, "us", rep,
         note="back-to-back barrier period")
    connects = [run[0] for run in runs]
    emit("connect_p50", {"clients": n, "client_mode": mode},
         percentile(connects, 50) / 1e3, "us", rep)
    emit("connect_max", {"clients": n, "client_mode": mode},
         max(connects) / 1e3, "us", rep)


def on_sigterm(signum, frame):
    for proc in list(_forked):
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="rtt,throughput,barrier")
    parser.add_argument("--client-mode", default="processes",
                        choices=["processes", "threads"])
    parser.add_argument("--rtt-iters", type=int, default=5000)
    parser.add_argument("--tp-clients", type=int_list, default=[8, 64])
    parser.add_argument("--tp-seconds", type=float, default=3.0)
    parser.add_argument("--barrier-clients", type=int_list,
                        default=[2, 8, 32, 128])
    parser.add_argument("--barrier-modes", default="torch,wait")
    parser.add_argument("--barrier-rounds", type=int, default=0,
                        help="rounds per barrier run (0: 30 for torch, "
                        "max(20, min(300, 3000 / N)) for wait)")
    opts = parser.parse_args()
    only = set(opts.only.split(","))
    unknown = only - {"rtt", "throughput", "barrier"}
    if unknown:
        parser.error("unknown --only %s" % ",".join(sorted(unknown)))
    variants = [v for v in opts.barrier_modes.split(",") if v]
    if set(variants) - {"torch", "wait"}:
        parser.error("--barrier-modes takes torch and/or wait")
    signal.signal(signal.SIGTERM, on_sigterm)
    status = 0

    def attempt(what, fn, *args, **fields):
        nonlocal status
        try:
            fn(*args)
        except Exception as e:  # PhaseError, or a store call that failed
            status = 1
            line = {"suite": SUITE, "error": "%s: %s" % (what, e)}
            line.update(fields)
            print(json.dumps(line), flush=True)

    try:
        with StoreServer() as server:
            for rep in range(opts.reps):
                if "rtt" in only:
                    attempt("rtt", measure_rtt, server.port, opts.rtt_iters,
                            rep, rep=rep)
                if "throughput" in only:
                    for n in opts.tp_clients:
                        attempt("throughput", measure_throughput, server.port,
                                n, opts.client_mode, opts.tp_seconds, rep,
                                rep=rep, clients=n)
                if "barrier" in only:
                    for variant in variants:
                        for n in opts.barrier_clients:
                            rounds = (opts.barrier_rounds or
                                      default_rounds(variant, n))
                            attempt("barrier %s" % variant, measure_barrier,
                                    server.port, n, variant, opts.client_mode,
                                    rounds, rep, rep=rep, clients=n)
    except PhaseError as e:
        print(json.dumps({"suite": SUITE, "error": str(e)}), flush=True)
        status = 1
    finally:
        for proc in list(_forked):
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=1)
    sys.exit(status)


if __name__ == "__main__":
    main()
