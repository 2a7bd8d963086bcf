"""What the peer scripts of bench/peers share: percentiles computed exactly as
bench/common/peer.cc computes cohort's, flag parsing helpers, and running a
group of forked ranks with a deadline.

A peer's figures are compared with cohort's in one ratio line, so both sides
must pick the same sample for the same percentile.
"""

import math
import multiprocessing
import os
import signal
import socket
import sys
import time
import traceback


def percentile(values, p):
    """Nearest rank on n - 1, rounded half away from zero: the rank
    std::lround picks in bench/common/peer.cc's Percentile (Python's round()
    rounds halves to even, which picks another sample for, e.g., the p50 of
    six values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = int(math.floor(p / 100.0 * (len(ordered) - 1) + 0.5))
    return ordered[min(len(ordered) - 1, max(0, k))]


def common_span(workers, warmup):
    """Examples/s of a parameter-server job over the span common to all its
    workers, as bench/training/ps_job.cc's CommonMeasuredSpan computes
    cohort's: `workers` is [(task, [step end times, us], batch)]; each
    worker's first `warmup` (>= 1) steps are skipped; the span starts when
    the last worker's warm-up ends and ends when the first worker's last
    step ends; every worker's steps ending in (start, end] count. Returns
    (examples/s, steps counted, span seconds); ValueError naming the task
    when a worker ran no step past its warm-up or the workers never trained
    together."""
    if not workers or warmup < 1:
        raise ValueError("need at least one worker and a warm-up of >= 1 step")
    for task, times, _ in workers:
        if len(times) <= warmup:
            raise ValueError("%s ran %d step(s), none past the warm-up of %d; "
                             "raise --steps" % (task, len(times), warmup))
    last_to_start = max(workers, key=lambda w: w[1][warmup - 1])
    first_to_stop = min(workers, key=lambda w: w[1][-1])
    start, end = last_to_start[1][warmup - 1], first_to_stop[1][-1]
    if end <= start:
        raise ValueError("the workers did not train together: %s ended its "
                         "last step at %d us, not after %s ended its warm-up "
                         "at %d us; raise --steps" %
                         (first_to_stop[0], end, last_to_start[0], start))
    steps = examples = 0
    for _, times, batch in workers:
        n = sum(1 for t in times if start < t <= end)
        steps += n
        examples += n * batch
    seconds = (end - start) * 1e-6
    return examples / seconds, steps, seconds


def int_list(text):
    """"2,8,32" -> [2, 8, 32] (empty items ignored)."""
    return [int(x) for x in text.split(",") if x]


# --- groups of forked ranks (torch.distributed peers) -----------------------

_forked = []  # the processes this script forked; only they are signalled


def pick_port():
    """A port the OS picks for the group's tcp:// rendezvous (the short
    window until rank 0's store binds it is the one torch's own launchers
    accept)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_entry(rank_main, rank, world, port, opts, conn):
    """A forked rank: sends ("ok", what rank_main returned) or ("error",
    message, traceback), so that the parent never waits out a rank that
    failed."""
    try:
        conn.send(("ok", rank_main(rank, world, port, opts)))
    except Exception as e:  # reported, never lost
        conn.send(("error", "rank %d of %d: %s: %s" %
                   (rank, world, type(e).__name__, e), traceback.format_exc()))
    finally:
        conn.close()


def run_group(rank_main, world, rep, opts):
    """Forks `world` processes running rank_main(rank, world, port, opts),
    which returns the rank's result lines (rank 0's are the group's; the
    others return []) or raises. Returns (lines with "rep" set, the first
    error or None). A group that overruns opts.deadline seconds is killed,
    by pid."""
    ctx = multiprocessing.get_context("fork")
    port = pick_port()
    members = []
    for rank in range(world):
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_rank_entry,
                           args=(rank_main, rank, world, port, opts,
                                 child_end),
                           daemon=True)
        proc.start()
        child_end.close()
        _forked.append(proc)
        members.append((rank, proc, parent_end))
    deadline = time.monotonic() + opts.deadline
    lines, error = [], None
    for rank, proc, conn in members:
        left = deadline - time.monotonic()
        if error is None and (left <= 0 or not conn.poll(left)):
            error = "rank %d of %d gave no result within --deadline %g s" % (
                rank, world, opts.deadline)
        elif error is None:
            try:
                reply = conn.recv()
            except EOFError:
                reply = ("error", "rank %d of %d exited with status %s "
                         "before reporting" % (rank, world, proc.exitcode),
                         "")
            if reply[0] == "ok":
                lines.extend(reply[1])
            else:
                error = reply[1]
                sys.stderr.write(reply[2])
        conn.close()
    for _, proc, _ in members:
        proc.join(timeout=max(0.1, deadline - time.monotonic()) if
                  error is None else 0.1)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
        _forked.remove(proc)
    for line in lines:
        line["rep"] = rep
    return lines, error


def _on_sigterm(signum, frame):
    for proc in list(_forked):
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def kill_forked_on_sigterm():
    """On SIGTERM (PeerRunner's timeout), kill the forked ranks and exit."""
    signal.signal(signal.SIGTERM, _on_sigterm)
