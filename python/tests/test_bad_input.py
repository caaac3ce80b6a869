"""Bad input gets a specific pact.Error naming what was wrong, and nothing leaks: the engine's
counters of registrations, transfers and tracked transfers are where they were."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pact
from conftest import counters

KEY = pact.Key(1, 1, 1)


@pytest.fixture
def rx(pair):
    return pair[1]


@pytest.mark.parametrize("obj, match", [
    (5, "neither the buffer protocol nor DLPack"),
    ("text", "neither the buffer protocol nor DLPack"),
    (np.zeros((8, 8))[:, ::2], "not contiguous"),
    (bytearray(), "empty"),
])
def test_register_refuses_what_is_not_memory(rx, obj, match):
    before = counters(rx)
    with pytest.raises(pact.InvalidArgument, match=match):
        rx.register(obj)
    assert counters(rx) == before


@pytest.mark.parametrize("offset, length, error, match", [
    (-1, 8, pact.InvalidArgument, "< 0"),
    (0, 0, pact.InvalidArgument, "length must be > 0"),
    (60, 8, pact.OutOfRange, "outside the 64 registered bytes"),
    (64, None, pact.InvalidArgument, "length must be > 0"),
])
def test_blocks_outside_the_registration(rx, offset, length, error, match):
    m = rx.register(bytearray(64))
    with pytest.raises(error, match=match):
        m.block(offset, length)


@pytest.mark.parametrize("key, match", [
    ((1, 2), "2 fields"),
    ((1, 2, 3, 4, 5), "5 fields"),
    ((1, -2, 3), "transfer_id must be an int"),
    ((1, "2", 3), "transfer_id must be an int"),
    ((1, 2, 3, 1 << 33), "generation must fit 32 bits"),
    ("key", "expected pact.Key"),
])
def test_malformed_keys(rx, key, match):
    m = rx.register(bytearray(64))
    before = counters(rx)
    with pytest.raises(pact.InvalidArgument, match=match):
        rx.expect(key, [m])
    assert counters(rx) == before


def test_blocks_that_are_not_blocks(pair):
    tx, rx, peer = pair
    m, other = rx.register(bytearray(64)), tx.register(bytearray(64))
    before = counters(rx)
    cases = [
        (m, "must be a list"),
        ([], "no blocks"),
        ([b"raw bytes"], r"blocks\[0\] is a bytes"),
        ([m, 3], r"blocks\[1\] is a int"),
        ([other], "memory of another engine"),
        ([rx.register(b"read only")], "read-only memory"),
    ]
    for blocks, match in cases:
        with pytest.raises(pact.InvalidArgument, match=match):
            rx.expect(KEY, blocks)
    closed = rx.register(bytearray(8))
    closed.close()
    with pytest.raises(pact.InvalidArgument, match="closed"):
        rx.expect(KEY, [closed])
    assert counters(rx)["open_transfers"] == before["open_transfers"]
    assert counters(rx)["tracked_transfers"] == 0


def test_read_only_memory_can_be_sent(pair):
    tx, rx, peer = pair
    dst = bytearray(9)
    x = rx.expect(KEY, [rx.register(dst)])
    tx.send(peer, KEY, [tx.register(b"read only")])
    assert x.wait(10).committed and dst == b"read only"


def test_unknown_peer_and_unknown_name(pair):
    tx, _, _ = pair
    m = tx.register(bytearray(8))
    before = counters(tx)
    with pytest.raises(pact.NotFound):
        tx.send(999, KEY, [m])
    with pytest.raises(pact.TimedOut):
        tx.wait_peer("nobody-has-this-name", timeout=0.1)
    assert counters(tx) == before


def test_connect_where_nothing_listens_is_refused(pair):
    tx, rx, _ = pair
    port = int(rx.address.rsplit(":", 1)[1])
    rx.close()  # the port is free now
    with pytest.raises(pact.Refused):
        tx.connect(f"127.0.0.1:{port}", timeout=5)
    with pytest.raises(pact.InvalidArgument):
        tx.connect("not an address", timeout=5)


@pytest.mark.parametrize("deadline, match", [(-1, ">= 0"), (0, "> 0 seconds"), ("soon", "number")])
def test_bad_deadlines(rx, deadline, match):
    m = rx.register(bytearray(8))
    with pytest.raises(pact.InvalidArgument, match=match):
        rx.expect(KEY, [m], deadline=deadline)
    assert counters(rx)["open_transfers"] == 0


def test_unknown_traffic_class_and_bad_engine_arguments(rx):
    m = rx.register(bytearray(8))
    before = counters(rx)
    with pytest.raises(pact.InvalidArgument, match="traffic class 'NO_SUCH_CLASS': expected one of DEFAULT, KV"):
        rx.expect(KEY, [m], traffic_class="NO_SUCH_CLASS")
    assert counters(rx) == before
    rx.expect(KEY, [m], traffic_class="kv").release()  # any case
    with pytest.raises(pact.InvalidArgument, match="port"):
        pact.Engine(port=70000)
    with pytest.raises(pact.Error, match="listen|address"):
        pact.Engine(listen="999.1.1.1")


def test_malformed_environment_names_the_variable():
    # A fresh interpreter: the PACT_* environment is read once per process.
    code = ("import pact\n"
            "try:\n    pact.Engine(name='bad-env')\n"
            "except pact.InvalidArgument as e:\n    print('refused:', e)\n")
    env = dict(os.environ, PACT_TC_DEFAULT="lanes=banana")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert "refused:" in out.stdout and "PACT_TC_DEFAULT" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("blob, match", [
    (b"\xff\xfe", "not a pact metadata blob"),
    (b"[1, 2]", "no 'format'"),
    (b'{"format": "pact-meta", "version": 2}', "version 2"),
    (b'{"format": "pact-meta", "version": 1, "name": "x", "model_epoch": 1}', "'address'"),
    (b'{"format": "pact-meta", "version": 1, "name": "x", "address": "a", "model_epoch": -1}',
     "negative"),
    (b"x" * (65 * 1024), "at most"),
    (17, "expected bytes"),
])
def test_malformed_metadata_blobs(pair, blob, match):
    tx, _, _ = pair
    with pytest.raises(pact.MetadataError, match=match):
        tx.add_remote(blob)


def test_metadata_blob_round_trip(pair):
    tx, rx, _ = pair
    blob = rx.export_metadata()
    doc = pact.parse_metadata(blob)
    assert doc["name"] == "rx" and doc["address"] == rx.address and doc["model_epoch"] == 1
    peer = tx.add_remote(blob)
    dst = bytearray(16)
    x = rx.expect(KEY, [rx.register(dst)])
    tx.send(peer, KEY, [tx.register(b"m" * 16)])
    assert x.wait(10).committed


def test_errors_carry_status_code_and_message(rx):
    with pytest.raises(pact.Error) as e:
        rx.expect(KEY, [rx.register(b"ro")])
    assert e.value.status == -1 and e.value.code == "PACT_ERR_INVALID_ARG"
    assert "read-only" in e.value.message and isinstance(e.value, ValueError)
    assert pact.error_class(-6) is pact.PeerLost and issubclass(pact.PeerLost, ConnectionError)
    assert pact.status_string(-10) == "PACT_ERR_DEADLINE"
