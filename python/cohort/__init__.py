"""cohort: a runtime for distributed machine-learning training.

The names follow the systems their users know:

- ``BarrierTaskContext`` (PySpark's barrier execution mode) for the tasks of
  ``cohort launch``;
- ``ClusterSpec``, the cluster resolvers and ``resolve()`` (TensorFlow's
  cluster configuration);
- ``CoordinationClient`` / ``coordination_client()``: the job's key-value
  store and named barriers;
- ``Server`` and ``Session`` (tf.distribute.Server, tf.compat.v1.Session)
  with NumPy arrays in and out.

Errors raise the classes of ``cohort.errors`` (TensorFlow's names), carrying
the runtime's message. See docs/python.md.
"""

from cohort import errors
from cohort._cohort import (
    BarrierTaskContext,
    BarrierTaskInfo,
    ClusterResolver,
    ClusterSpec,
    CoordinationClient,
    GCEClusterResolver,
    KubernetesClusterResolver,
    SageMakerClusterResolver,
    Server,
    Session,
    SimpleClusterResolver,
    SlurmClusterResolver,
    TFConfigClusterResolver,
    UnionClusterResolver,
    WatchResult,
    coordination_client,
    resolve,
)

__all__ = [
    "BarrierTaskContext",
    "BarrierTaskInfo",
    "ClusterResolver",
    "ClusterSpec",
    "CoordinationClient",
    "GCEClusterResolver",
    "KubernetesClusterResolver",
    "SageMakerClusterResolver",
    "Server",
    "Session",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "UnionClusterResolver",
    "WatchResult",
    "coordination_client",
    "errors",
    "resolve",
]
