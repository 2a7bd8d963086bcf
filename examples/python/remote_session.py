"""A graph run across two servers from Python, with NumPy arrays.

Starts two cohort servers in this process (tasks worker:0 and worker:1 of
one cluster), writes a small graph whose nodes are placed on both, and runs
it through worker:0's master:

    PYTHONPATH=build/python python3 examples/python/remote_session.py

A server of another process works the same: pass its target
(grpc://host:port, printed by `cohort server`) and the job's token.
"""

import os
import secrets
import socket
import tempfile

import numpy as np

import cohort

# y = (x + c) * 2: x is fed on worker:0, the add runs on worker:1 (next to
# c), the multiply back on worker:0. Tensors cross between the tasks.
GRAPH = """
node { name: "x" op: "Placeholder" device: "/job:worker/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "c" op: "Const" device: "/job:worker/task:1"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 4 } }
    float_val: 1 float_val: 2 float_val: 3 float_val: 4 } } } }
node { name: "s" op: "Add" device: "/job:worker/task:1" input: "x" input: "c"
  attr { key: "T" value { type: DT_FLOAT } } }
node { name: "two" op: "Const" device: "/job:worker/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 2 } } } }
node { name: "y" op: "Mul" device: "/job:worker/task:0" input: "s" input: "two"
  attr { key: "T" value { type: DT_FLOAT } } }
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    token = os.environ.get("COHORT_JOB_TOKEN") or secrets.token_hex(16)
    cluster = cohort.ClusterSpec(
        {"worker": [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]})
    servers = [cohort.Server(cluster, job_name="worker", task_index=i, token=token)
               for i in range(2)]
    with tempfile.NamedTemporaryFile("w", suffix=".pbtxt", delete=False) as f:
        f.write(GRAPH)
    try:
        with cohort.Session(servers[0].target, graph=f.name, token=token) as sess:
            x = np.arange(4, dtype=np.float32)
            y = sess.run("y:0", feed_dict={"x": x})
            print(f"x = {x}\ny = (x + c) * 2 = {y}  (c on worker:1, y on worker:0)")
            assert np.array_equal(y, (x + np.array([1, 2, 3, 4], np.float32)) * 2)
    finally:
        os.unlink(f.name)
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
