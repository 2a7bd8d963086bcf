"""BarrierTaskContext in a gang of Python tasks under `cohort launch`."""

import os
import subprocess
import sys
import textwrap

import pytest

import cohort
from cohort import errors
from conftest import COHORT


def launch(tmp_path, n, script, *flags, timeout=120):
    path = tmp_path / "task.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run(
        [COHORT, "launch", "-n", str(n), "--quiet", *flags, "--", sys.executable, str(path)],
        capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def task_lines(output, tag):
    """The lines a task printed after `tag`, by partition."""
    found = {}
    for line in output.splitlines():
        if tag in line:
            part, rest = line.split(tag, 1)[1].strip().split(" ", 1)
            found[int(part)] = rest
    return found


def test_gang_of_python_tasks_syncs_and_gathers(tmp_path):
    r = launch(tmp_path, 3, """
        import cohort
        ctx = cohort.BarrierTaskContext.get()
        me = ctx.partitionId()
        ctx.barrier()
        parts = ctx.allGather(f"rows={me * 10}")
        infos = [t.address for t in ctx.getTaskInfos()]
        kv = cohort.coordination_client()
        total = kv.add("arrived", 1)
        kv.barrier("after-add", timeout=60)
        print("RESULT", me, ctx.numTasks(), ctx.attemptNumber(), ",".join(parts),
              len(infos), kv.task, kv.try_get("arrived").hex() != "", flush=True)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = task_lines(r.stdout, "RESULT")
    assert sorted(lines) == [0, 1, 2]
    for part, rest in lines.items():
        assert rest == f"3 0 rows=0,rows=10,rows=20 3 worker:{part} True"


def test_barrier_timeout_names_the_missing_partition(tmp_path):
    r = launch(tmp_path, 2, """
        import cohort, time
        ctx = cohort.BarrierTaskContext.get()
        if ctx.partitionId() == 1:
            # Partition 1 never syncs; it waits for partition 0's verdict.
            print("VERDICT 1", cohort.coordination_client().get("verdict", timeout=60).decode(),
                  flush=True)
        else:
            try:
                ctx.barrier()
            except cohort.errors.DeadlineExceededError as e:
                cohort.coordination_client().set("verdict", "timeout")
                print("VERDICT 0", e.message, flush=True)
    """, "--barrier-timeout", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = task_lines(r.stdout, "VERDICT")
    assert lines[1] == "timeout"
    assert "Partitions that did not arrive: [1] of 2" in lines[0]


def test_get_outside_launch_names_the_missing_variable():
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    r = subprocess.run(
        [sys.executable, "-c",
         "import cohort\n"
         "try:\n"
         "    cohort.BarrierTaskContext.get()\n"
         "except cohort.errors.FailedPreconditionError as e:\n"
         "    print(e.message)\n"],
        capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "COHORT_" in r.stdout and "cohort launch" in r.stdout


def test_failed_python_task_fails_the_gang(tmp_path):
    r = launch(tmp_path, 2, """
        import cohort
        ctx = cohort.BarrierTaskContext.get()
        if ctx.partitionId() == 1:
            raise SystemExit(7)
        ctx.barrier()
    """)
    assert r.returncode != 0
    assert "worker:1" in r.stdout + r.stderr


def test_ctrl_c_in_a_barrier_fails_the_gang_clearly(tmp_path):
    # Partition 0 parks in barrier(); partition 1 never syncs and sends it
    # SIGINT. The KeyboardInterrupt ends task 0 at once (the barrier
    # timeout is an hour), and the launcher names it as the root cause.
    r = launch(tmp_path, 2, """
        import os, signal, time
        import cohort
        ctx = cohort.BarrierTaskContext.get()
        kv = cohort.coordination_client()
        if ctx.partitionId() == 0:
            kv.set("pid0", str(os.getpid()))
            ctx.barrier()
        else:
            pid = int(kv.get("pid0", timeout=60))
            os.kill(pid, signal.SIGINT)
            time.sleep(3600)  # stopped by the launcher when task 0 fails
    """, "--barrier-timeout", "3600", timeout=60)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "KeyboardInterrupt" in out
    assert "worker:0" in out
