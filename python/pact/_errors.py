"""pact.Error and its subclasses, one per status code of pact.h (codes are frozen)."""

from __future__ import annotations


class Error(Exception):
    """A pact call failed. ``status`` is the C status code, ``code`` its name, ``message`` the
    engine's message naming what was wrong."""

    status: int = -16
    code: str = "PACT_ERR_INTERNAL"

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.code = _names.get(status, f"status {status}")
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} [{self.code}]"


class InvalidArgument(Error, ValueError):
    """A malformed argument; the message names it."""


class NoMemory(Error, MemoryError):
    pass


class NotFound(Error, LookupError):
    """Unknown transfer, peer, registration or name."""


class TimedOut(Error, TimeoutError):
    """A blocking call's timeout passed (the operation goes on)."""


class EpochMismatch(Error):
    """The receiver is on another model epoch."""


class PeerLost(Error, ConnectionError):
    """The peer died or closed."""


class Refused(Error, ConnectionError):
    """The peer refused the connection (version, epoch, auth) or nothing listens there."""


class ChecksumError(Error):
    """The payload check failed and no retry was left."""


class Rejected(Error):
    """The receiver's commit policy rejected the transfer."""


class DeadlineExceeded(Error, TimeoutError):
    """The transfer's deadline passed."""


class Duplicate(Error):
    """The same (request, transfer, generation) is already known."""


class OutOfRange(Error, IndexError):
    """A block outside its registration or the advertised range."""


class Stale(Error):
    """An older generation than the receiver expects."""


class Busy(Error):
    """The resource is in use (a registration with live transfers)."""


class SystemCallError(Error, OSError):
    """A system call failed."""


class Internal(Error):
    """A bug or an unexpected UCX failure."""


class Incomplete(Error):
    """Data pieces missing after the sender finished, no retry left."""


class Canceled(Error):
    """The other side's application released the transfer."""


class Unsupported(Error):
    """This host cannot do it (GPU memory without a driver or CUDA-capable UCX)."""


class PeerStale(Error, ConnectionError):
    """The application disconnected the peer as gone or restarted (Engine.disconnect, or a
    metadata-store watch: its lease expired or it came back on a new epoch)."""


class MetadataError(Error):
    """A metadata blob or store entry is malformed or of another version."""


_classes: dict[int, type[Error]] = {
    -1: InvalidArgument, -2: NoMemory, -3: NotFound, -4: TimedOut, -5: EpochMismatch,
    -6: PeerLost, -7: Refused, -8: ChecksumError, -9: Rejected, -10: DeadlineExceeded,
    -11: Duplicate, -12: OutOfRange, -13: Stale, -14: Busy, -15: SystemCallError,
    -16: Internal, -17: Incomplete, -18: Canceled, -19: Unsupported, -20: PeerStale,
}
_names: dict[int, str] = {
    -1: "PACT_ERR_INVALID_ARG", -2: "PACT_ERR_NO_MEMORY", -3: "PACT_ERR_NOT_FOUND",
    -4: "PACT_ERR_TIMED_OUT", -5: "PACT_ERR_EPOCH_MISMATCH", -6: "PACT_ERR_PEER_LOST",
    -7: "PACT_ERR_REFUSED", -8: "PACT_ERR_CHECKSUM", -9: "PACT_ERR_REJECTED",
    -10: "PACT_ERR_DEADLINE", -11: "PACT_ERR_DUPLICATE", -12: "PACT_ERR_OUT_OF_RANGE",
    -13: "PACT_ERR_STALE", -14: "PACT_ERR_BUSY", -15: "PACT_ERR_SYSTEM",
    -16: "PACT_ERR_INTERNAL", -17: "PACT_ERR_INCOMPLETE", -18: "PACT_ERR_CANCELED",
    -19: "PACT_ERR_UNSUPPORTED", -20: "PACT_ERR_PEER_STALE",
}
for _status, _cls in _classes.items():
    _cls.status, _cls.code = _status, _names[_status]


def error_class(status: int) -> type[Error]:
    """The exception class of a status code (Error for codes newer than this package)."""
    return _classes.get(status, Error)


def error_for(status: int, message: str) -> Error | None:
    """The exception a transfer's result stands for, None for PACT_OK / PACT_IN_PROGRESS."""
    if status >= 0:
        return None
    return error_class(status)(status, message)
