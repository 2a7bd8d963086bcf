"""ClusterSpec, the resolvers and cohort.resolve()."""

import json
import os
import subprocess

import pytest

import cohort
from cohort import errors
from conftest import COHORT


def test_cluster_spec_dense_and_sparse_round_trip():
    spec = cohort.ClusterSpec({"worker": ["w0:1", "w1:1"], "ps": {3: "p3:1"}})
    assert spec.jobs == ["worker", "ps"]
    assert spec.num_tasks("worker") == 2
    assert spec.task_indices("ps") == [3]
    assert spec.task_address("worker", 1) == "w1:1"
    assert spec.job_tasks("ps") == [None, None, None, "p3:1"]
    assert spec.as_dict() == {"worker": ["w0:1", "w1:1"], "ps": {3: "p3:1"}}
    assert "ps" in spec and "chief" not in spec
    assert cohort.ClusterSpec(spec.as_dict()) == spec
    assert cohort.ClusterSpec(spec) == spec
    assert bool(spec) and not cohort.ClusterSpec({})


def test_cluster_spec_errors_name_the_job_and_index():
    spec = cohort.ClusterSpec({"worker": ["w0:1"]})
    with pytest.raises(errors.InvalidArgumentError, match="No such job in cluster: 'chief'"):
        spec.num_tasks("chief")
    with pytest.raises(errors.InvalidArgumentError,
                       match="No task with index 4 in job 'worker'"):
        spec.task_address("worker", 4)
    with pytest.raises(ValueError, match="worker"):  # also a ValueError
        cohort.ClusterSpec({"worker": [1, 2]})
    with pytest.raises(TypeError, match="got int"):
        cohort.ClusterSpec(42)


def test_tf_config_resolver_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"]},
        "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"}))
    r = cohort.TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {"chief": ["c:2222"],
                                          "worker": ["w0:2222", "w1:2222"]}
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 1, "grpc")
    assert r.master() == "grpc://w1:2222"
    assert r.master("chief", 0, rpc_layer="") == "c:2222"
    r.task_id = 0
    assert r.master() == "grpc://w0:2222"
    # Constructor overrides win over TF_CONFIG.
    assert cohort.TFConfigClusterResolver(task_type="chief", task_id=0).master() == \
        "grpc://c:2222"


def test_resolve_matches_the_command_line(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["127.0.0.1:5000", "127.0.0.1:5001"]},
        "task": {"type": "worker", "index": 0}}))
    for name in ("SLURM_JOB_ID", "SLURM_PROCID", "SM_HOSTS", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    got = cohort.resolve()
    cli = subprocess.run([COHORT, "resolve", "--format", "json"], env=os.environ.copy(),
                         capture_output=True, text=True, check=True)
    assert got == json.loads(cli.stdout)
    assert got["resolver"] == "tf_config"
    # No rpc_layer in TF_CONFIG: the bare address, as TensorFlow.
    assert got["master"] == "127.0.0.1:5000"


def test_resolve_unknown_resolver_is_an_error():
    with pytest.raises(errors.CohortError, match="no_such"):
        cohort.resolve("no_such")


def test_slurm_resolver_from_the_step_environment(monkeypatch):
    env = {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4",
           "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    r = cohort.SlurmClusterResolver(jobs={"ps": 1, "worker": 3}, port_base=9000,
                                    gpus_per_node=0)
    assert r.cluster_spec().as_dict() == {
        "ps": ["node1:9000"], "worker": ["node1:9001", "node2:9000", "node2:9001"]}
    assert (r.task_type, r.task_id) == ("worker", 1)
    monkeypatch.delenv("SLURM_PROCID")
    with pytest.raises(errors.FailedPreconditionError, match="SLURM_PROCID"):
        cohort.SlurmClusterResolver(gpus_per_node=0)


def test_simple_and_union_resolvers():
    a = cohort.SimpleClusterResolver({"worker": ["w0:1"]}, task_type="worker", task_id=0,
                                     rpc_layer="grpc", num_accelerators={"GPU": 2})
    b = cohort.SimpleClusterResolver(cohort.ClusterSpec({"ps": ["p0:1"]}))
    u = cohort.UnionClusterResolver(a, b)
    assert u.cluster_spec().as_dict() == {"worker": ["w0:1"], "ps": ["p0:1"]}
    # TensorFlow's rule: the union's own rpc layer (none here), not the first's.
    assert u.master("worker", 0) == "w0:1"
    assert u.master("worker", 0, rpc_layer="grpc") == "grpc://w0:1"
    assert a.num_accelerators() == {"GPU": 2}
    with pytest.raises(errors.InvalidArgumentError, match="At least one ClusterResolver"):
        cohort.UnionClusterResolver()
    with pytest.raises(errors.InvalidArgumentError, match="sub-class of `ClusterResolver`"):
        cohort.UnionClusterResolver(a, "not a resolver")


def test_malformed_dicts_are_errors_not_crashes():
    looped = {}
    looped["worker"] = looped
    with pytest.raises(errors.InvalidArgumentError, match="nested more than"):
        cohort.ClusterSpec(looped)
    with pytest.raises(errors.InvalidArgumentError, match="64 bits"):
        cohort.ClusterSpec({"worker": [10**30]})
    with pytest.raises(errors.InvalidArgumentError, match='both "0"'):
        cohort.ClusterSpec({"worker": {0: "a:1", "0": "b:1"}})
    spec = cohort.ClusterSpec({"worker": ["a:1"]})
    assert spec != 5 and not (spec == None)  # noqa: E711
    assert spec == cohort.ClusterSpec({"worker": ["a:1"]})
