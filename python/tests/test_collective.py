"""cohort.Session(config=...): collective ops through the runtime from Python.

A gang under `cohort launch --chief --workers 1`: each task starts its own
cohort.Server from TF_CONFIG and runs its own graph (between-graph
replication) with the collective group leader named in the session config;
the runtime forms the group through the leader. And the config's checks:
a wrong key or type is refused naming it.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cohort
from cohort import errors
from conftest import COHORT, TOKEN

LEADER = "/job:chief/replica:0/task:0"

# Every task's graph: its own x, the group's mean of x, then (after the mean:
# members run collectives in the same order) every member's x by rank.
GRAPH = """
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "mean" op: "CollectiveReduce" input: "x"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "group_size" value { i: %(size)d } }
  attr { key: "group_key" value { i: 1 } }
  attr { key: "instance_key" value { i: 1 } }
  attr { key: "merge_op" value { s: "Add" } }
  attr { key: "final_op" value { s: "Div" } } }
node { name: "gathered" op: "CollectiveGather" input: "x" input: "^mean"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "group_size" value { i: %(size)d } }
  attr { key: "group_key" value { i: 1 } }
  attr { key: "instance_key" value { i: 2 } } }
"""

# Rank r's feeds, step by step. Step 1's sums round in float32 (1e8 + 1 is
# 1e8, 0.1 + 0.2 is not 0.3): the mean must be float32's, bit for bit.
FEEDS = {
    0: [[1, 2, 3.5, -4], [0.1, 1e8, -3, 7]],
    1: [[3, 10, 0.25, 4], [0.2, 1, 5, 0.5]],
}

TASK = """
import json, sys
import numpy as np
import cohort

FEEDS = {feeds}
resolver = cohort.TFConfigClusterResolver()
task_type, task_id = resolver.task_type, resolver.task_id
# COHORT_JOB_TOKEN and the cluster are the launcher's.
server = cohort.Server(resolver.cluster_spec(), job_name=task_type, task_index=task_id)
# No barrier before the first step: the group is resolved through the
# leader's server at the first collective, and a leader not serving yet is
# asked again until the op's deadline.
kv = cohort.coordination_client()
# The leader orders members by job name, then task index.
rank = {{"chief": 0, "worker": 1}}[task_type]
config = {{"experimental": {{"collective_group_leader": "{leader}"}},
          # As CollectiveAllReduceStrategy: this task's master uses this task.
          "device_filters": [f"/job:{{task_type}}/task:{{task_id}}"]}}
results = []
with cohort.Session(server.target, graph=sys.argv[1], timeout=30, config=config) as sess:
    for step, mine in enumerate(FEEDS[rank]):
        mean, gathered = sess.run(["mean:0", "gathered:0"],
                                  {{"x": np.array(mine, np.float32)}})
        a, b = (np.array(FEEDS[r][step], np.float32) for r in (0, 1))
        assert mean.dtype == np.float32 and gathered.dtype == np.float32
        np.testing.assert_array_equal(mean, (a + b) / np.float32(2))
        np.testing.assert_array_equal(gathered, np.concatenate([a, b]))
        results.append({{"mean": mean.tolist(), "gathered": gathered.tolist()}})
print("RESULT", f"{{task_type}}:{{task_id}}", rank, json.dumps(results), flush=True)
# Neither task stops its server while the other may still reach it.
kv.barrier("collective-test-done", timeout=30)
server.stop()
"""


def expected_step(step):
    a, b = (np.array(FEEDS[r][step], np.float32) for r in (0, 1))
    return {"mean": ((a + b) / np.float32(2)).tolist(),
            "gathered": np.concatenate([a, b]).tolist()}


def test_gang_reduces_and_gathers_through_the_group_leader(tmp_path):
    graph = tmp_path / "task.pbtxt"
    graph.write_text(GRAPH % {"size": 2})
    script = tmp_path / "task.py"
    script.write_text(textwrap.dedent(TASK.format(feeds=FEEDS, leader=LEADER)))
    r = subprocess.run(
        [COHORT, "launch", "--chief", "--workers", "1", "--no-progress", "--",
         sys.executable, str(script), str(graph)],
        capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0, r.stdout + r.stderr
    results = {}
    for line in r.stdout.splitlines():
        if "RESULT " in line:
            task, rank, values = line.split("RESULT ", 1)[1].split(" ", 2)
            results[task] = (int(rank), json.loads(values))
    assert sorted(results) == ["chief:0", "worker:0"], r.stdout + r.stderr
    expected = [expected_step(0), expected_step(1)]
    # Step 1 rounds as float32 does (in float64: 0.15 and 50000000.5).
    assert expected[1]["mean"][0] != 0.15 and expected[1]["mean"][1] == 5e7
    assert results["chief:0"] == (0, expected)
    assert results["worker:0"] == (1, expected)


@pytest.fixture
def collective_graph(tmp_path):
    path = tmp_path / "one.pbtxt"
    path.write_text(GRAPH % {"size": 1})
    return str(path)


def test_config_reaches_the_master_of_a_grpc_session(collective_graph):
    # One task, a group of one: the group forms only when the config names
    # the leader; without it the op says the leader is missing.
    server = cohort.Server.create_local_server(token=TOKEN)
    try:
        with cohort.Session(server.target, graph=collective_graph, token=TOKEN) as s:
            with pytest.raises(errors.FailedPreconditionError,
                               match="collective_group_leader"):
                s.run("mean:0", {"x": [1, 2]})
        config = {"experimental": {"collective_group_leader": server.task_name},
                  "device_filters": ["/job:localhost/task:0"],
                  "operation_timeout_in_ms": 30000}
        with cohort.Session(server.target, graph=collective_graph, token=TOKEN,
                            config=config) as s:
            mean, gathered = s.run(["mean:0", "gathered:0"], {"x": [1, 3]})
            assert mean.tolist() == [1, 3] and gathered.tolist() == [1, 3]
    finally:
        server.stop()


@pytest.mark.parametrize("config, path", [
    ({"experimental": {"colective_group_leader": LEADER}},
     r'"experimental\.colective_group_leader" is not a key of '
     r"cohort\.ConfigProto\.Experimental; its keys are collective_group_leader"),
    ({"device_filter": ["/job:worker"]}, r'"device_filter" is not a key'),
    ({"intra_op_parallelism_threads": "4"},
     r'"intra_op_parallelism_threads" must be an int \(int32\), got str'),
    ({"intra_op_parallelism_threads": 2**31},
     r'"intra_op_parallelism_threads" is out of range for int32'),
    ({"allow_soft_placement": 1}, r'"allow_soft_placement" must be a bool'),
    # Protobuf's JSON parser alone would take "x" for ["x"].
    ({"device_filters": "/job:worker"}, r'"device_filters" must be a list, got str'),
    ({"device_filters": ["/job:worker", 1]}, r'"device_filters\[1\]" must be a str'),
    ({"experimental": {"coordination_config": {"heartbeat_timeout_in_ms": 1.5}}},
     r'"experimental\.coordination_config\.heartbeat_timeout_in_ms" must be an int'),
    ({"experimental": LEADER}, r'"experimental" must be a dict'),
    ({"intraOpParallelismThreads": 1, "intra_op_parallelism_threads": 2},
     r'"intra_op_parallelism_threads" names intra_op_parallelism_threads, which '
     r"another key"),
])
def test_a_wrong_config_key_or_type_is_a_value_error_naming_it(config, path):
    # Refused before any session exists: the target is never called.
    with pytest.raises(ValueError, match="^config: " + path) as e:
        cohort.Session("grpc://127.0.0.1:1", config=config)
    assert isinstance(e.value, errors.InvalidArgumentError)


def test_config_is_a_dict_or_none():
    with pytest.raises(TypeError, match="config: expected a dict"):
        cohort.Session("", config=[("intra_op_parallelism_threads", 1)])
    cohort.Session("", config=None).close()


def test_a_local_session_takes_only_the_config_it_can_apply(collective_graph):
    # target "": this process's threads and step deadline apply (JSON names
    # too); the distributed runtime's keys are refused by name.
    config = {"intraOpParallelismThreads": 2, "operation_timeout_in_ms": 30000,
              "experimental": {}}
    with cohort.Session("", graph=collective_graph, config=config) as s:
        with pytest.raises(errors.FailedPreconditionError, match="group_key 1"):
            s.run("mean:0", {"x": [1.0]})
    for key, value in [("device_filters", ["/job:worker"]),
                       ("experimental", {"collective_group_leader": LEADER}),
                       ("allow_soft_placement", True)]:
        with pytest.raises(errors.InvalidArgumentError,
                           match=f'^config: "{key}" applies to a session on a '
                                 r"cluster's master \(target grpc://"):
            cohort.Session("", graph=collective_graph, config={key: value})
