"""Shared fixtures: the cohort binary, free ports, a coordination service."""

import os
import random
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COHORT = os.environ.get("COHORT_BIN", os.path.join(ROOT, "build", "bin", "cohort"))
TOKEN = "python-test-token"


def pick_port():
    """A free port below the ephemeral range (as rpc::PickFreePort): no
    outgoing connection of a parallel test can take it before we bind it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(64):
        port = random.randint(10000, low - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def wait_for(predicate, timeout, what):
    """Polls predicate until it is true; fails naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)  # paces the polling; the deadline decides
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def in_cohort_call(pid):
    """Whether process `pid` has a cohort call in flight: the thread that
    runs a blocking call is named "cohort-pycall" (python/src/status.h)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == "cohort-pycall":
                    return True
        except OSError:
            pass  # the thread ended while we looked
    return False


@pytest.fixture
def coordinator():
    """A `cohort coordinator` for worker:0 and worker:1; yields host:port."""
    cluster = '{"worker": ["127.0.0.1:1", "127.0.0.1:2"]}'
    env = dict(os.environ, COHORT_JOB_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [COHORT, "coordinator", "--cluster", cluster, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        port = int(proc.stdout.readline())
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=timeout,
                          capture_output=True, text=True)
