"""pact: epoch-aware block transfers on UCX, for Python (docs/python.md).

An Engine moves sets of blocks from a sender to a receiver under a Key (request_id, transfer_id,
model_epoch, generation). The receiver commits a transfer only when every byte is in its memory,
the key's epoch is current and the checksum (when the traffic class asks) matches; nothing
uncommitted is ever reported as committed.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from ._errors import (Busy, Canceled, ChecksumError, DeadlineExceeded, Duplicate, EpochMismatch,
                      Error, Incomplete, Internal, InvalidArgument, MetadataError, NoMemory,
                      NotFound, OutOfRange, PeerLost, PeerStale, Refused, Rejected, Stale, SystemCallError,
                      TimedOut, Unsupported, error_class, error_for)
from ._pact import API_VERSION, Block, Engine, Group, Memory, Transfer, __version__, status_string
from . import _meta

__all__ = [
    "API_VERSION", "__version__", "Block", "Engine", "Group", "Key", "Memory", "State", "TraceEvent", "Transfer",
    "TransferInfo", "status_string", "parse_metadata", "Error", "Busy", "Canceled",
    "ChecksumError", "DeadlineExceeded", "Duplicate", "EpochMismatch", "Incomplete", "Internal",
    "InvalidArgument", "MetadataError", "NoMemory", "NotFound", "OutOfRange", "PeerLost", "PeerStale",
    "Refused", "Rejected", "Stale", "SystemCallError", "TimedOut", "Unsupported", "error_class",
]


class Key(NamedTuple):
    """A transfer's identity; the receiver commits it only on its current model_epoch."""
    request_id: int
    transfer_id: int
    model_epoch: int
    generation: int = 0


class State(enum.IntEnum):
    """pact_state_t: where a transfer is (docs/engine.md)."""
    ALLOCATED = 0
    ADVERTISED = 1
    POSTED = 2
    IN_FLIGHT = 3
    REMOTE_DONE = 4
    VERIFIED = 5
    COMMITTED = 6
    RELEASED = 7
    RETRYING = 8
    ABORTED = 9


class TransferInfo(NamedTuple):
    """A transfer's state. ``final``: committed or aborted and no data operation targets its
    blocks any more. ``result``: 0 committed, 1 in progress, else the status of why not."""
    xfer: int
    state: State
    result: int
    final: bool
    retries: int
    key: Key
    peer: int
    bytes: int

    @property
    def committed(self) -> bool:
        return self.final and self.result == 0

    @property
    def error(self) -> Error | None:
        """The exception the result stands for (None when committed or still open)."""
        return error_for(self.result, f"transfer {self.key} ended {status_string(self.result)}")

    def raise_for_result(self) -> "TransferInfo":
        """Raises the result's pact.Error unless committed or still open; returns self."""
        if (e := self.error) is not None:
            raise e
        return self


class TraceEvent(NamedTuple):
    time_ns: int
    key: Key
    peer: int
    role: str
    state: State
    event: int


parse_metadata = _meta.parse_metadata
Engine.export_metadata = _meta.export_metadata
Engine.add_remote = _meta.add_remote
