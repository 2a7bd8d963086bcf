"""Server and Session: a graph across two servers, NumPy in and out."""

import threading

import numpy as np
import pytest

import cohort
from cohort import errors
from conftest import TOKEN, pick_port, run_python

# x (fed on worker:0) + c (a Const on worker:1), added on worker:1; y = 2 * s
# on worker:0.
GRAPH = """
node { name: "x" op: "Placeholder" device: "/job:worker/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "c" op: "Const" device: "/job:worker/task:1"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT
    tensor_shape { dim { size: 3 } } float_val: 1 float_val: 2 float_val: 3 } } } }
node { name: "s" op: "Add" device: "/job:worker/task:1" input: "x" input: "c"
  attr { key: "T" value { type: DT_FLOAT } } }
node { name: "two" op: "Const" device: "/job:worker/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 2 } } } }
node { name: "y" op: "Mul" device: "/job:worker/task:0" input: "s" input: "two"
  attr { key: "T" value { type: DT_FLOAT } } }
node { name: "n" op: "Placeholder" attr { key: "dtype" value { type: DT_INT64 } } }
node { name: "n2" op: "Identity" input: "n" attr { key: "T" value { type: DT_INT64 } } }
"""


@pytest.fixture
def cluster():
    spec = {"worker": [f"127.0.0.1:{pick_port()}", f"127.0.0.1:{pick_port()}"]}
    servers = [cohort.Server(spec, job_name="worker", task_index=i, token=TOKEN)
               for i in range(2)]
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "graph.pbtxt"
    path.write_text(GRAPH)
    return path


def test_session_across_two_servers_with_numpy(cluster, graph_file):
    assert cluster[0].target.startswith("grpc://127.0.0.1:")
    assert cluster[1].task_name == "/job:worker/replica:0/task:1"
    with cohort.Session(cluster[0].target, graph=str(graph_file), token=TOKEN) as sess:
        x = np.array([10, 20, 30], dtype=np.float32)
        y, s = sess.run(["y:0", "s:0"], feed_dict={"x": x})
        np.testing.assert_array_equal(s, [11, 22, 33])
        np.testing.assert_array_equal(y, [22, 44, 66])
        assert y.dtype == np.float32
        # A list takes the placeholder's dtype; one name gives one value.
        np.testing.assert_array_equal(sess.run("s:0", {"x": [0, 0, 1]}), [1, 2, 4])
        n = sess.run("n2:0", {"n": np.arange(6, dtype=np.int64).reshape(2, 3)})
        assert n.shape == (2, 3) and n.dtype == np.int64 and n[1, 2] == 5
        # An op name runs it and returns None.
        assert sess.run(["n2", "n2:0"], {"n": 7}) == [None, 7]


def test_fetched_arrays_share_the_tensor_buffer(graph_file):
    with cohort.Session("", graph=graph_file) as s:  # a PathLike
        out = s.run("y:0", {"x": np.arange(3, dtype=np.float32)})
    # A computed result is not copied: the array's base is the capsule that
    # keeps the tensor alive (a copy would be an ndarray owning its data).
    assert type(out.base).__name__ == "PyCapsule"
    np.testing.assert_array_equal(out, [2, 6, 10])


def test_graph_as_serialized_bytes_and_errors(graph_file):
    with pytest.raises(errors.InvalidArgumentError, match="not a serialized GraphDef"):
        cohort.Session("", graph=b"\xff\xff not a graph")
    with pytest.raises(errors.NotFoundError):
        cohort.Session("", graph="/nonexistent/graph.pb")
    with pytest.raises(errors.InvalidArgumentError, match="feed x"):
        cohort.Session("", graph=str(graph_file)).run("n2:0", {"x": np.array([object()])})


def test_op_errors_name_the_node(cluster, graph_file):
    sess = cohort.Session(cluster[0].target, graph=str(graph_file), token=TOKEN)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"node 's' \(op Add\).*incompatible shapes"):
        sess.run("y:0", {"x": np.ones(4, dtype=np.float32)})  # 4 + 3 elements
    sess.close()
    with pytest.raises(errors.FailedPreconditionError, match="closed Session"):
        sess.run("y:0")


def test_wrong_token_is_unauthenticated(cluster, graph_file):
    with pytest.raises(errors.UnauthenticatedError):
        cohort.Session(cluster[0].target, graph=str(graph_file), token="wrong")


def test_server_needs_a_token_or_insecure(monkeypatch):
    monkeypatch.delenv("COHORT_JOB_TOKEN", raising=False)
    with pytest.raises(errors.FailedPreconditionError, match="no job token"):
        cohort.Server({"local": [f"127.0.0.1:{pick_port()}"]})
    with pytest.raises(errors.InvalidArgumentError, match="job_name"):
        cohort.Server({"a": ["127.0.0.1:1"], "b": ["127.0.0.1:2"]}, token=TOKEN)


def test_local_server_binds_an_ephemeral_port_and_serves(tmp_path):
    # TF's create_local_server, and port 0 in any one-task cluster: the
    # target names the port the server bound, and a session runs there.
    local = cohort.Server.create_local_server(token=TOKEN)
    one = cohort.Server({"worker": ["localhost:0"]}, token=TOKEN)
    try:
        for server in (local, one):
            host, port = server.target[len("grpc://"):].rsplit(":", 1)
            assert server.target.startswith("grpc://localhost:")
            assert host == "localhost" and int(port) > 0
        assert local.task_name == "/job:localhost/replica:0/task:0"
        assert local.target != one.target
        # The unplaced part of GRAPH: it runs on whichever task serves it.
        graph = tmp_path / "local.pbtxt"
        graph.write_text(GRAPH[GRAPH.index('node { name: "n" '):])
        for server in (local, one):
            with cohort.Session(server.target, graph=str(graph), token=TOKEN) as sess:
                assert sess.run("n2:0", {"n": 7}) == 7
    finally:
        local.stop()
        one.stop()
    # With more than one task, port 0 would leave the others without an
    # address for this task.
    with pytest.raises(errors.InvalidArgumentError, match="port 0"):
        cohort.Server({"worker": ["localhost:0", "localhost:1"]},
                      job_name="worker", task_index=0, token=TOKEN)


def test_join_returns_when_stopped_from_another_thread():
    server = cohort.Server({"local": [f"127.0.0.1:{pick_port()}"]}, token=TOKEN)
    stopping = threading.Event()

    def stop():
        stopping.set()
        server.stop()

    stopper = threading.Timer(0.2, stop)
    stopper.start()
    server.join()
    # join() did not return before stop() began.
    assert stopping.is_set()
    stopper.join()


def test_fetched_arrays_do_not_alias_session_state(tmp_path):
    # A Const's value and a variable read stay in the session: writing to
    # the fetched array must not change what later steps see.
    path = tmp_path / "state.pbtxt"
    path.write_text("""
node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT
    tensor_shape { dim { size: 2 } } float_val: 1 float_val: 2 } } } }
node { name: "v" op: "VarHandleOp" attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shared_name" value { s: "v" } } }
node { name: "init" op: "AssignVariableOp" input: "v" input: "c"
  attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "read" op: "ReadVariableOp" input: "v"
  attr { key: "dtype" value { type: DT_FLOAT } } }
""")
    with cohort.Session("", graph=path) as s:
        s.run("c:0")[:] = 99
        np.testing.assert_array_equal(s.run("c:0"), [1, 2])
        s.run("init")
        s.run("read:0")[:] = -1
        np.testing.assert_array_equal(s.run("read:0"), [1, 2])


def test_feeds_and_timeouts_are_checked(graph_file):
    with cohort.Session("", graph=graph_file) as s:
        with pytest.raises(TypeError, match="feed n: None"):
            s.run("n2:0", {"n": None})
        # Any byte order and any descriptor of int64 (np.longlong).
        assert s.run("n2:0", {"n": np.array([1, 2], dtype=">i8")}).tolist() == [1, 2]
        assert s.run("n2:0", {"n": np.array([3], dtype=np.longlong)}).tolist() == [3]
        for bad in (0, -1, float("nan")):
            with pytest.raises(errors.InvalidArgumentError, match="timeout"):
                s.run("n2:0", {"n": 1}, timeout=bad)


def test_interpreter_exit_with_a_call_in_flight_in_a_daemon_thread():
    code = (
        "import threading, cohort\n"
        f"s = cohort.Server({{'local': ['127.0.0.1:{pick_port()}']}}, token='t')\n"
        "t = threading.Thread(target=s.join, daemon=True)\n"
        "t.start()\n"
        "t.join(timeout=0.5)\n"
        "assert t.is_alive()\n"
        "print('exiting', flush=True)\n")
    r = run_python(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "exiting"
