"""Engine(listen=...) takes what a user types: an IP address, an interface name or a host name; on
the wildcard it publishes an address a peer can use (address, export_metadata), never 0.0.0.0."""

import json

import pytest

import pact
from conftest import warm


@pytest.mark.parametrize("listen", ["0.0.0.0", "lo", "localhost", "127.0.0.1"])
def test_listen_takes_an_interface_host_or_wildcard_and_publishes_a_usable_address(listen):
    rx = pact.Engine(name="rx-" + listen, listen=listen, model_epoch=1)
    try:
        host, port = rx.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0, rx.address  # PACT_NET_DEVICES=lo
        assert json.loads(rx.export_metadata())["address"] == rx.address
        tx = pact.Engine(name="tx-" + listen, model_epoch=1)
        try:
            peer = tx.connect(rx.address, timeout=10)  # the published address reaches it
            warm(tx, rx, peer)  # a transfer each way (and UCX 1.13 wired up before the close)
        finally:
            tx.close()
    finally:
        rx.close()


def test_listen_names_what_it_cannot_resolve():
    with pytest.raises(pact.InvalidArgument, match="listen 'no-such-if0': not an IP address, an interface"):
        pact.Engine(name="bad", listen="no-such-if0", model_epoch=1)
