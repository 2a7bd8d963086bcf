"""CoordinationClient against a real `cohort coordinator` process."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import cohort
from cohort import errors
from conftest import TOKEN, in_cohort_call, wait_for


def test_key_value_operations(coordinator):
    c = cohort.CoordinationClient(coordinator, TOKEN)
    assert c.address == coordinator and c.task is None
    c.set("cfg/lr", "0.1")
    c.set("cfg/raw", b"\x00\xff")
    assert c.get("cfg/lr", timeout=5) == b"0.1"
    assert c.try_get("cfg/raw") == b"\x00\xff"
    with pytest.raises(errors.AlreadyExistsError, match="cfg/lr"):
        c.set("cfg/lr", "0.2")
    c.set("cfg/lr", "0.2", overwrite=True)
    assert c.list("cfg") == {"cfg/lr": b"0.2", "cfg/raw": b"\x00\xff"}
    assert c.add("steps", 5) == 5
    assert c.add("steps") == 6
    assert c.compare_and_swap("leader", None, "w0") == (True, b"w0")
    assert c.compare_and_swap("leader", None, "w1") == (False, b"w0")
    assert c.compare_and_swap("leader", "w0", "w1") == (True, b"w1")
    c.delete("cfg")
    with pytest.raises(errors.NotFoundError, match="cfg/lr"):
        c.try_get("cfg/lr")


def test_get_times_out_naming_the_key(coordinator):
    c = cohort.CoordinationClient(coordinator, TOKEN)
    with pytest.raises(errors.DeadlineExceededError, match="never/set"):
        c.get("never/set", timeout=0.2)
    with pytest.raises(errors.InvalidArgumentError, match="timeout"):
        c.get("x", timeout=-1)


def test_wrong_token_is_refused_and_changes_nothing(coordinator):
    with pytest.raises(errors.UnauthenticatedError):
        cohort.CoordinationClient(coordinator, "wrong-token").set("intruder", "yes")
    with pytest.raises(errors.NotFoundError):
        cohort.CoordinationClient(coordinator, TOKEN).try_get("intruder")


def test_token_comes_from_the_environment(coordinator, monkeypatch):
    monkeypatch.setenv("COHORT_JOB_TOKEN", TOKEN)
    cohort.CoordinationClient(coordinator).set("from_env", "ok")


def test_blocking_get_releases_the_gil(coordinator):
    c = cohort.CoordinationClient(coordinator, TOKEN)
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        # A held GIL would stop the counting thread for the whole wait.
        with pytest.raises(errors.DeadlineExceededError):
            c.get("never", timeout=0.5)
        during = ticks[0]
    finally:
        stop.set()
        t.join(timeout=30)
    assert during > 10000, f"only {during} ticks while get() waited"


def test_watch_sees_the_next_change(coordinator):
    c = cohort.CoordinationClient(coordinator, TOKEN)
    c.set("w", "1")
    first = c.watch("w", 0, timeout=5)
    assert (first.present, first.value) == (True, b"1")
    seen = []
    t = threading.Thread(target=lambda: seen.append(c.watch("w", first.version, timeout=30)))
    t.start()
    c.set("w", "2", overwrite=True)
    t.join(timeout=30)
    assert seen[0].value == b"2" and seen[0].version > first.version


def test_named_barrier_between_two_tasks(coordinator):
    w0 = cohort.CoordinationClient(coordinator, TOKEN, task="worker:0")
    w1 = cohort.CoordinationClient(coordinator, TOKEN, task="worker:1")
    errors_seen = []

    def wait(client):
        try:
            client.barrier("start", timeout=30)
        except Exception as e:  # reported below
            errors_seen.append(e)

    threads = [threading.Thread(target=wait, args=(c,)) for c in (w0, w1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a barrier call hung"
    assert errors_seen == []
    # Alone, worker:0 times out naming the barrier.
    with pytest.raises(errors.DeadlineExceededError, match="start"):
        w0.barrier("start", timeout=0.3)


def test_barrier_needs_a_task(coordinator):
    c = cohort.CoordinationClient(coordinator, TOKEN)
    with pytest.raises(errors.FailedPreconditionError, match="task="):
        c.barrier("b", timeout=1)
    with pytest.raises(errors.InvalidArgumentError, match="JOB:INDEX"):
        cohort.CoordinationClient(coordinator, TOKEN, task="worker")


def test_coordination_client_outside_launch_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("COHORT_COORDINATION_SERVICE_ADDRESS", raising=False)
    with pytest.raises(errors.FailedPreconditionError,
                       match="COHORT_COORDINATION_SERVICE_ADDRESS"):
        cohort.coordination_client()


def test_ctrl_c_interrupts_a_blocking_get(coordinator):
    code = (
        "import cohort, sys\n"
        f"c = cohort.CoordinationClient({coordinator!r}, {TOKEN!r})\n"
        "try:\n"
        "    print('blocking', flush=True)\n"
        "    c.get('never', timeout=120)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         env=os.environ.copy())
    assert p.stdout.readline().strip() == "blocking"
    # SIGINT only once the get is in flight (the client's connect, the only
    # call before it, has returned and its thread is gone): a signal that
    # came earlier would raise before the get and test nothing.
    wait_for(lambda: in_cohort_call(p.pid), 30, "the get to be in flight")
    # Without the signal check the get would block for 120 s.
    start = time.monotonic()
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 3
    assert p.stdout.read().strip() == "interrupted"
    assert time.monotonic() - start < 10


def test_empty_address_is_refused_at_once():
    with pytest.raises(errors.InvalidArgumentError, match="address is empty"):
        cohort.CoordinationClient("", TOKEN)


def test_delete_of_the_empty_key_is_refused(coordinator):
    c = cohort.CoordinationClient(coordinator, TOKEN)
    c.set("keep", "me")
    with pytest.raises(errors.InvalidArgumentError, match="empty key"):
        c.delete("")
    assert c.try_get("keep") == b"me"
