"""Exceptions raised by cohort, one class per status code.

The names are TensorFlow's (``tf.errors``). Every error of the C++ side
arrives as the class of its code with the C++ message unchanged, so a barrier
timeout still names the partitions that did not arrive. ``CohortError`` is the
base class of all of them; classes whose meaning matches a built-in
exception also derive from it (``InvalidArgumentError`` is a ``ValueError``,
``DeadlineExceededError`` a ``TimeoutError``, ``UnavailableError`` a
``ConnectionError``, ``NotFoundError`` a ``LookupError``).
"""

__all__ = [
    "CohortError",
    "CancelledError",
    "UnknownError",
    "InvalidArgumentError",
    "DeadlineExceededError",
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "AbortedError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "UnavailableError",
    "DataLossError",
    "UnauthenticatedError",
]


class CohortError(Exception):
    """An error of the cohort runtime.

    Attributes:
      code: the status code's name, e.g. ``"DEADLINE_EXCEEDED"``.
      message: the runtime's message (what happened, which task, key,
        barrier or node, and what to check).
    """

    code = "UNKNOWN"

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class CancelledError(CohortError):
    """The operation was cancelled (``Cancel()``, a stopped job)."""

    code = "CANCELLED"


class UnknownError(CohortError):
    """An error without a more precise code."""

    code = "UNKNOWN"


class InvalidArgumentError(CohortError, ValueError):
    """Bad input: a malformed cluster, an unknown resolver, a wrong dtype."""

    code = "INVALID_ARGUMENT"


class DeadlineExceededError(CohortError, TimeoutError):
    """A blocking call ran out of time; the message names who it waited for."""

    code = "DEADLINE_EXCEEDED"


class NotFoundError(CohortError, LookupError):
    """A key, file, node or device that does not exist."""

    code = "NOT_FOUND"


class AlreadyExistsError(CohortError):
    """A key that exists already (set without overwrite)."""

    code = "ALREADY_EXISTS"


class PermissionDeniedError(CohortError):
    """The peer refused the call."""

    code = "PERMISSION_DENIED"


class ResourceExhaustedError(CohortError):
    """A cap was reached (message size, store size, sessions)."""

    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(CohortError):
    """State must be fixed first (not under ``cohort launch``, shut down)."""

    code = "FAILED_PRECONDITION"


class AbortedError(CohortError):
    """Restart at a higher level: a new session, a new attempt."""

    code = "ABORTED"


class OutOfRangeError(CohortError):
    """Input exhausted."""

    code = "OUT_OF_RANGE"


class UnimplementedError(CohortError):
    """Not supported by cohort."""

    code = "UNIMPLEMENTED"


class InternalError(CohortError):
    """A bug or a broken invariant; please report it."""

    code = "INTERNAL"


class UnavailableError(CohortError, ConnectionError):
    """The peer could not be reached; retrying the call may succeed."""

    code = "UNAVAILABLE"


class DataLossError(CohortError):
    """Unrecoverable data loss or corruption (a torn checkpoint)."""

    code = "DATA_LOSS"


class UnauthenticatedError(CohortError):
    """A missing or wrong job token (or client certificate)."""

    code = "UNAUTHENTICATED"


# absl::StatusCode values (the same numbers as gRPC's codes).
_BY_CODE = {
    1: CancelledError,
    2: UnknownError,
    3: InvalidArgumentError,
    4: DeadlineExceededError,
    5: NotFoundError,
    6: AlreadyExistsError,
    7: PermissionDeniedError,
    8: ResourceExhaustedError,
    9: FailedPreconditionError,
    10: AbortedError,
    11: OutOfRangeError,
    12: UnimplementedError,
    13: InternalError,
    14: UnavailableError,
    15: DataLossError,
    16: UnauthenticatedError,
}


def _from_code(code, message):
    """The exception for an absl::StatusCode value (used by the extension)."""
    return _BY_CODE.get(code, UnknownError)(message)
