"""Every object of the package has a working, informative repr (the REPL's echo, print and
logging all call it), and the package says its version."""

import logging
import re

import pact

KEY = pact.Key(request_id=42, transfer_id=0, model_epoch=1)


def test_version_is_pacts_release():
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", pact.__version__), pact.__version__
    assert "__version__" in pact.__all__


def test_every_object_has_an_informative_repr(pair, caplog):
    tx, rx, peer = pair
    dst, src = bytearray(4096), bytearray(b"k" * 4096)
    mem_rx, mem_tx = rx.register(dst), tx.register(src)
    x = rx.expect(KEY, [mem_rx.block(0, 4096)])
    assert repr(x).startswith("<pact.Transfer %d expect key=(42, 0, 1, 0) " % x.id), repr(x)
    s = tx.send(peer, KEY, [mem_tx.block(0, 4096)])
    info = x.wait(timeout=10)
    assert s.wait(timeout=10).committed and info.committed
    assert repr(x) == "<pact.Transfer %d expect key=(42, 0, 1, 0) COMMITTED final, PACT_OK>" % x.id
    assert repr(s).startswith("<pact.Transfer %d send key=(42, 0, 1, 0) " % s.id), repr(s)
    assert "committed=True" in repr(info) or "COMMITTED" in repr(info), repr(info)
    assert repr(KEY) == "Key(request_id=42, transfer_id=0, model_epoch=1, generation=0)"
    assert repr(rx) == "<pact.Engine rx>"
    assert repr(mem_rx).startswith("<pact.Memory"), repr(mem_rx)
    assert repr(mem_rx.block(0, 16)).startswith("<pact.Block"), repr(mem_rx.block(0, 16))
    with caplog.at_level(logging.INFO):  # logging and print format objects with repr/str
        logging.getLogger("t").info("transfer %s %r", x, s)
        print(x, s, info, mem_rx)
    assert "pact.Transfer" in caplog.text
    assert x.release() and s.release()
    assert repr(x) == "<pact.Transfer %d expect released>" % x.id


def test_group_and_closed_engine_reprs():
    e = pact.Engine(name="solo", listen="127.0.0.1", model_epoch=1)
    g = e.group(1, [e.connect(e.address)], 0)
    assert repr(g) == "<pact.Group>"
    g.close()
    assert repr(g) == "<pact.Group closed>"
    e.close()
    assert repr(e) == "<pact.Engine solo closed>"
