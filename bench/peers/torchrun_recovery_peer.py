#!/usr/bin/python3
"""cohort's torchrun peer for `cohort bench recovery`: how long a PyTorch job
takes to train again after one of its workers is killed, as its docs
recommend running it.

The recovery suite (bench/recovery) runs this in the same run as its own
jobs and divides its times by this script's (bench/common/peer.h):

  job        torchrun (torch.distributed.run) --standalone --nproc_per_node
             TASKS --max_restarts 3, every other setting its default but
             --redirects 1 --tee 1 (below, in one_run); each
             worker trains the parameter-server job's model (Linear(16,
             hidden) -> ReLU -> Linear(hidden, hidden) -> ReLU ->
             Linear(hidden, 4); --hidden-layers 1 drops the middle layer,
             the data-parallel job's model; batch 64, SGD) wrapped in
             DistributedDataParallel on gloo, one thread per process
  checkpoint rank 0 saves the model, the optimizer and the step every
             --checkpoint-every steps (torch.save to a temporary file, then
             renamed), and every worker resumes from it when it starts
  the kill   once rank 0 has logged step --kill-step, this script sends
             SIGKILL to rank 1 (the pid it wrote); torchrun's agent then
             stops the other workers and starts all of them again

  detect_time  ms  from the kill to the first process of the job knowing of
      it: a surviving worker whose collective failed (it writes when, then
      exits with the error), or the agent starting the workers again,
      whichever comes first
  rejoin_time  ms  from the kill to the end of the first step trained after
      the restart (rank 0's step log)
  steps_lost   steps  the last step rank 0 finished before the kill, minus
      the step the restarted job resumed from

The job must then run to --steps and exit 0, or the repetition fails.
Output: one JSON object per line, {"suite": "torchrun_recovery", "metric",
"params": {"tasks", "hidden_layers", "kill_step", "checkpoint_every", "peer_job":
"ddp", "torch"}, "value", "unit", "rep"}; a failed repetition prints {"suite":
"torchrun_recovery", "error": ..., "rep": r} and the script exits 1. Only
the process group it started is signalled.

  /usr/bin/python3 torchrun_recovery_peer.py [--tasks 4] [--reps 3]
      [--kill-step 120] [--checkpoint-every 50] [--steps 160]
      [--hidden 1024] [--hidden-layers 2] [--batch 64] [--deadline 300]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

SUITE = "torchrun_recovery"
FEATURES = 16
CLASSES = 4


def train(opts):
    """One worker under torchrun (--train)."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with open(os.path.join(opts.dir, "pid.%d.%d" % (rank, restart)), "w") as f:
        f.write("%d\n" % os.getpid())
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(FEATURES, opts.hidden), torch.nn.ReLU()]
    for _ in range(opts.hidden_layers - 1):
        layers += [torch.nn.Linear(opts.hidden, opts.hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(opts.hidden, CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    checkpoint = os.path.join(opts.dir, "checkpoint.pt")
    step = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = DistributedDataParallel(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1234 + rank)
    teacher = torch.randn(FEATURES, CLASSES, generator=gen)
    log = open(os.path.join(opts.dir, "steps"), "a") if rank == 0 else None
    try:
        step = train_steps(opts, ddp, model, optimizer, loss_fn, gen, teacher,
                           step, restart, log, checkpoint)
    except Exception:
        # A survivor learns of the kill here (gloo's read fails).
        with open(os.path.join(opts.dir, "failed.%d.%d" % (rank, restart)),
                  "w") as f:
            f.write("%.6f\n" % time.time())
        raise
    dist.destroy_process_group()


def train_steps(opts, ddp, model, optimizer, loss_fn, gen, teacher, step,
                restart, log, checkpoint):
    """Trains from `step` to --steps; rank 0 (`log` set) logs each step and
    checkpoints."""
    import torch
    while step < opts.steps:
        x = torch.randn(opts.batch, FEATURES, generator=gen)
        y = torch.argmax(x @ teacher, dim=1)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        optimizer.step()
        step += 1
        if log is not None:
            log.write("%d %d %.6f\n" % (step, restart, time.time()))
            log.flush()
            if step % opts.checkpoint_every == 0:
                tmp = checkpoint + ".tmp"
                torch.save({"model": model.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "step": step}, tmp)
                os.replace(tmp, checkpoint)
    return step


def torch_version():
    """The version of the torch that torchrun runs (this interpreter's)."""
    import torch
    return torch.__version__


def read_steps(path):
    """[(step, restart, time)] of rank 0's step log so far."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and line.endswith("\n"):
                    out.append((int(parts[0]), int(parts[1]), float(parts[2])))
    except FileNotFoundError:
        pass
    return out


def one_run(rep, opts):
    """One job with one kill; returns its measurement lines."""
    work = tempfile.mkdtemp(prefix="cohort-torchrun-recovery-")
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    # --redirects 1 --tee 1 (workers' stdout to a file and the console):
    # torch 1.13's default, "0", names no member of its Std flag enum under
    # Python 3.11 (which iterates only single-bit members), and torchrun
    # fails at start.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(opts.tasks), "--max_restarts", "3",
           "--redirects", "1", "--tee", "1",
           os.path.abspath(__file__), "--train", "--dir", work,
           "--steps", str(opts.steps), "--checkpoint-every",
           str(opts.checkpoint_every), "--hidden", str(opts.hidden),
           "--batch", str(opts.batch)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=env,
                           start_new_session=True, text=True)
    output = []  # (time read, line)
    lock = threading.Lock()

    def reader():
        for line in job.stdout:
            with lock:
                output.append((time.time(), line.rstrip("\n")))

    def tail():
        with lock:
            return " | ".join(line for _, line in output[-8:])

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    deadline = time.time() + opts.deadline
    steps_path = os.path.join(work, "steps")
    try:
        while True:
            if time.time() > deadline or job.poll() is not None:
                raise RuntimeError("rank 0 never reached step %d (torchrun "
                                   "exit %r): %s" % (opts.kill_step,
                                                     job.poll(), tail()))
            logged = read_steps(steps_path)
            if logged and logged[-1][0] >= opts.kill_step:
                break
            time.sleep(0.002)
        with open(os.path.join(work, "pid.1.0")) as f:
            victim = int(f.read())
        os.kill(victim, signal.SIGKILL)
        killed = time.time()
        while True:
            if time.time() > deadline or job.poll() is not None:
                raise RuntimeError("no step after the restart (torchrun exit "
                                   "%r): %s" % (job.poll(), tail()))
            after = [s for s in read_steps(steps_path) if s[1] >= 1]
            if after:
                break
            time.sleep(0.002)
        code = job.wait(timeout=max(1, deadline - time.time()))
        thread.join(timeout=5)
        if code != 0:
            raise RuntimeError("torchrun exited %d: %s" % (code, tail()))
        before = [s for s in read_steps(steps_path) if s[1] == 0 and
                  s[2] <= killed]
        # Who knew first: a survivor's failed collective, or the agent's
        # new workers (their pid files).
        known = []
        for name in os.listdir(work):
            path = os.path.join(work, name)
            if name.startswith("failed.") and name.endswith(".0"):
                with open(path) as f:
                    known.append(float(f.read()))
            elif name.startswith("pid.") and name.endswith(".1"):
                known.append(os.stat(path).st_mtime)
        known = [t for t in known if t >= killed]
        if not known:
            raise RuntimeError("no process of the job knew of the kill")
        params = {"tasks": opts.tasks, "hidden_layers": opts.hidden_layers,
                  "kill_step": opts.kill_step,
                  "checkpoint_every": opts.checkpoint_every,
                  "peer_job": "ddp", "torch": torch_version()}
        first = after[0]
        figures = [("detect_time", (min(known) - killed) * 1e3, "ms"),
                   ("rejoin_time", (first[2] - killed) * 1e3, "ms"),
                   ("steps_lost", before[-1][0] - (first[0] - 1), "steps")]
        return [{"suite": SUITE, "metric": m, "params": params,
                 "value": round(v, 3), "unit": u, "rep": rep}
                for m, v, u in figures]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--dir")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--kill-step", type=int, default=120)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--hidden-layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--deadline", type=float, default=300)
    opts = parser.parse_args()
    if opts.train:
        train(opts)
        return 0
    if (opts.tasks < 2 or min(opts.reps, opts.kill_step, opts.checkpoint_every,
                              opts.hidden, opts.hidden_layers,
                              opts.batch) < 1 or
            opts.steps <= opts.kill_step):
        print(json.dumps({"suite": SUITE, "error": "bad flags: need --tasks "
                          ">= 2, positive sizes and --steps > --kill-step"}))
        return 1
    status = 0
    for rep in range(opts.reps):
        try:
            lines = one_run(rep, opts)
        except Exception as e:  # one failed repetition is reported, not fatal
            print(json.dumps({"suite": SUITE, "error": str(e), "rep": rep}),
                  flush=True)
            status = 1
            continue
        for line in lines:
            print(json.dumps(line), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
