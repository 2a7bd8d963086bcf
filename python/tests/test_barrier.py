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
        [COHORT, "launch", "-n", str(n), "--no-progress", *flags, "--", sys.executable, str(path)],
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
    # SIGINT, only once the barrier call is in flight: partition 0 writes its
    # pid without a cohort call, so from then on its only call thread
    # ("cohort-pycall", python/src/status.h) is the barrier's. The
    # KeyboardInterrupt ends task 0 at once (the barrier timeout is an
    # hour), and the launcher names it as the root cause.
    script = """
        import os, pathlib, signal, time
        import cohort
        PID_FILE = pathlib.Path(@PID_FILE@)

        def in_cohort_call(pid):
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{tid}/comm") as f:
                        if f.read().strip() == "cohort-pycall":
                            return True
                except OSError:
                    pass
            return False

        def wait_for(predicate, what):
            deadline = time.monotonic() + 60
            while not predicate():
                assert time.monotonic() < deadline, f"never saw {what}"
                time.sleep(0.01)  # paces the polling; the state decides

        ctx = cohort.BarrierTaskContext.get()
        if ctx.partitionId() == 0:
            tmp = PID_FILE.with_suffix(".tmp")
            tmp.write_text(str(os.getpid()))
            tmp.rename(PID_FILE)
            ctx.barrier()
        else:
            wait_for(PID_FILE.exists, "partition 0's pid file")
            pid = int(PID_FILE.read_text())
            wait_for(lambda: in_cohort_call(pid), "partition 0 in barrier()")
            os.kill(pid, signal.SIGINT)
            signal.pause()  # stopped by the launcher when task 0 fails
    """.replace("@PID_FILE@", repr(str(tmp_path / "pid0")))
    r = launch(tmp_path, 2, script, "--barrier-timeout", "3600", timeout=60)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "KeyboardInterrupt" in out
    assert "ctx.barrier()" in out  # raised inside the call, not before it
    assert "worker:0" in out
