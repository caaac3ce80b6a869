"""Engine metadata as an opaque blob, for applications with their own side channel (NIXL's
get_agent_metadata / add_remote_agent shape): what a peer needs to reach this engine."""

from __future__ import annotations

import json

from ._errors import MetadataError

FORMAT = "pact-meta"
VERSION = 1
_MAX_BLOB = 64 * 1024


def export_metadata(engine) -> bytes:
    """This engine's metadata: name, address and model epoch, as bytes to pass to a peer's
    Engine.add_remote. The engine must listen (Engine(listen=...))."""
    doc = {"format": FORMAT, "version": VERSION, "name": engine.name,
           "address": engine.address, "model_epoch": engine.model_epoch}
    return json.dumps(doc, sort_keys=True).encode()


def parse_metadata(blob: bytes | bytearray | memoryview | str) -> dict:
    """The fields of a blob from export_metadata; raises pact.MetadataError naming what is wrong."""
    if isinstance(blob, str):
        blob = blob.encode()
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise MetadataError(-1, f"metadata: expected bytes, got {type(blob).__name__}")
    if len(blob) > _MAX_BLOB:
        raise MetadataError(-1, f"metadata: {len(blob)} bytes (at most {_MAX_BLOB})")
    try:
        doc = json.loads(bytes(blob))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MetadataError(-1, f"metadata: not a pact metadata blob ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise MetadataError(-1, "metadata: not a pact metadata blob (no 'format': 'pact-meta')")
    if doc.get("version") != VERSION:
        raise MetadataError(-1, f"metadata: version {doc.get('version')!r}, this pact reads {VERSION}")
    for field, kind in (("name", str), ("address", str), ("model_epoch", int)):
        if not isinstance(doc.get(field), kind) or isinstance(doc.get(field), bool):
            raise MetadataError(-1, f"metadata: field '{field}' missing or not a {kind.__name__}")
    if doc["model_epoch"] < 0:
        raise MetadataError(-1, "metadata: field 'model_epoch' is negative")
    return doc


def add_remote(engine, blob, timeout: float = 10.0) -> int:
    """Connects to the engine a blob describes; returns the peer id."""
    doc = parse_metadata(blob)
    return engine.connect(doc["address"], timeout=timeout)
