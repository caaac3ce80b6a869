"""The pact package end to end: transfers, commit semantics, the policy, threads and the GIL."""

import threading
import time

import numpy as np
import pytest

import pact
from conftest import counters, warm

KEY = pact.Key(request_id=1, transfer_id=1, model_epoch=1)


def test_round_trip_bytearray_to_numpy_commits_byte_exact(pair):
    tx, rx, peer = pair
    src = bytearray(np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes())
    dst = np.zeros(1 << 20, dtype=np.uint8)
    before = rx.stats()
    x = rx.expect(KEY, [rx.register(dst)])
    s = tx.send(peer, KEY, [tx.register(src)])
    info = x.wait(timeout=10)
    assert info.committed and info.state == pact.State.COMMITTED and info.bytes == len(src)
    assert info.key == KEY and info.error is None
    assert s.wait(timeout=10).committed
    assert dst.tobytes() == bytes(src)
    after = rx.stats()
    assert after["committed"] - before["committed"] == 1
    assert after["policy_committed"] - before["policy_committed"] == 1


def test_batched_kv_pages_commit_each_request(pair):
    tx, rx, peer = pair
    pages, page = 16, 16 << 10
    src = np.arange(pages * page // 4, dtype=np.uint32).view(np.uint8).reshape(pages, page)
    dst = np.zeros_like(src)
    ms, md = tx.register(src), rx.register(dst)
    keys = [pact.Key(100 + i, 0, 1) for i in range(pages)]
    xs = rx.expect_batch([(k, [md.block(i * page, page)]) for i, k in enumerate(keys)])
    ss = tx.send_batch([(peer, k, [ms.block(i * page, page)]) for i, k in enumerate(keys)],
                       deadline=30)
    assert all(x.wait(10).committed for x in xs)
    assert all(s.wait(10).committed for s in ss)
    assert np.array_equal(src, dst)


def test_poll_reports_each_final_transfer_once(pair):
    tx, rx, peer = pair
    dst = bytearray(4096)
    md, ms = rx.register(dst), tx.register(bytes(range(256)) * 16)
    keys = [pact.Key(i, 0, 1) for i in range(1, 5)]
    for k in keys:
        rx.expect(k, [md.block((k.request_id - 1) * 1024, 1024)])
        tx.send(peer, k, [ms.block(0, 1024)])
    seen = []
    while len(seen) < len(keys):
        got = rx.poll(timeout=10)
        assert got, "poll timed out with transfers open"
        seen += got
    assert sorted(i.key for i in seen) == keys and all(i.committed for i in seen)
    assert rx.poll(timeout=0) == []
    assert rx.stats()["tracked_transfers"] == 0


def test_a_poll_that_waits_for_nothing_sleeps(pair):
    """Engine.poll(timeout) with a progress thread polls only while the engine is busy
    (PACT_PROGRESS_SPIN), then sleeps: it used to spin for its whole timeout."""
    tx, rx, peer = pair
    x = rx.expect(pact.Key(77, 0, 1), [rx.register(bytearray(64)).block(0, 64)])  # never sent
    time.sleep(0.01)  # past the spin window of the expect
    cpu0, wall0 = time.process_time(), time.monotonic()
    assert rx.poll(timeout=0.5) == []
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    assert wall >= 0.45
    assert cpu < 0.2 * wall, f"poll used {cpu:.3f} s of CPU in {wall:.3f} s"
    x.release()


def test_dropped_transfer_keeps_its_memory_until_final(pair):
    tx, rx, peer = pair
    dst = bytearray(1 << 16)
    rx.expect(KEY, [rx.register(dst)])  # neither the Memory nor the Transfer kept
    assert rx.stats()["tracked_transfers"] == 1
    with pytest.raises(BufferError):
        dst.extend(b"x")  # still registered: the buffer cannot move
    tx.send(peer, KEY, [tx.register(b"\x07" * (1 << 16))])
    [info] = rx.poll(timeout=10)
    assert info.committed and dst == b"\x07" * (1 << 16)


def test_epoch_mismatch_on_expect_and_on_a_stale_sender(pair):
    tx, rx, peer = pair
    rx.set_epoch(2)
    assert rx.model_epoch == 2
    md = rx.register(bytearray(64))
    with pytest.raises(pact.EpochMismatch, match="epoch"):
        rx.expect(KEY, [md])
    s = tx.send(peer, KEY, [tx.register(b"a" * 64)])  # the sender still on epoch 1
    info = s.wait(timeout=10)
    assert info.final and not info.committed
    assert isinstance(info.error, pact.EpochMismatch)
    with pytest.raises(pact.EpochMismatch):
        info.raise_for_result()


def test_set_epoch_aborts_what_is_open_of_the_old_epoch(pair):
    _, rx, _ = pair
    x = rx.expect(KEY, [rx.register(bytearray(64))])
    rx.set_epoch(2)
    info = x.wait(timeout=10)
    assert info.final and info.state == pact.State.ABORTED
    assert isinstance(info.error, pact.EpochMismatch)


def test_refused_request_is_rejected_on_both_sides_and_never_committed(pair):
    tx, rx, peer = pair
    before = rx.stats()
    rx.refuse(KEY.request_id)
    dst = bytearray(256)
    x = rx.expect(KEY, [rx.register(dst)])
    s = tx.send(peer, KEY, [tx.register(b"z" * 256)])
    assert isinstance(x.wait(10).error, pact.Rejected)
    assert isinstance(s.wait(10).error, pact.Rejected)
    st = rx.stats()
    assert st["committed"] == before["committed"] and st["policy_refused"] == 1
    rx.allow(KEY.request_id)
    k2 = KEY._replace(generation=1)
    x = rx.expect(k2, [rx.register(dst)])
    tx.send(peer, k2, [tx.register(b"y" * 256)])
    assert x.wait(10).committed


def test_blocking_wait_releases_the_gil(pair):
    tx, rx, peer = pair
    x = rx.expect(KEY, [rx.register(bytearray(1024))])
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("info", x.wait(timeout=20)))
    waiter.start()
    # Runs only if the waiting thread let go of the GIL; otherwise the wait times out first.
    tx.send(peer, KEY, [tx.register(b"g" * 1024)])
    waiter.join(timeout=30)
    assert not waiter.is_alive() and result["info"].committed


def test_deadline_ends_a_transfer_nobody_sends(pair):
    _, rx, _ = pair
    x = rx.expect(KEY, [rx.register(bytearray(64))], deadline=0.2)
    info = x.wait(timeout=10)
    assert info.final and isinstance(info.error, pact.DeadlineExceeded)


def test_wait_timeout_raises_timed_out_and_the_transfer_goes_on(pair):
    _, rx, _ = pair
    x = rx.expect(KEY, [rx.register(bytearray(64))])
    with pytest.raises(pact.TimedOut, match="not done within 50 ms"):
        x.wait(timeout=0.05)
    assert not x.query().final
    assert x.release() is True
    assert rx.stats()["tracked_transfers"] == 0


def test_memory_in_use_is_busy_until_released(pair):
    _, rx, _ = pair
    md = rx.register(bytearray(64))
    x = rx.expect(KEY, [md])
    with pytest.raises(pact.Busy):
        md.close()
    assert x.release()
    md.close()
    assert md.closed and rx.stats()["open_registrations"] == 0


def test_receiver_engine_closing_fails_the_senders_transfer(pair):
    tx, rx, peer = pair
    s = tx.send(peer, KEY, [tx.register(b"q" * 64)])  # never expected: waits for its advert
    rx.close()
    info = s.wait(timeout=20)
    assert info.final and not info.committed
    assert isinstance(info.error, pact.PeerLost)
    with pytest.raises(pact.PeerLost):
        tx.send(peer, KEY._replace(transfer_id=2), [tx.register(b"q")])


def test_credit_is_seen_by_the_sender(pair):
    tx, rx, peer = pair
    rx.set_credit(1 << 20)
    x = rx.expect(KEY, [rx.register(bytearray(4096))])
    s = tx.send(peer, KEY, [tx.register(b"c" * 4096)])
    assert s.wait(10).committed and x.wait(10).committed
    budget, in_use = tx.peer_credit(peer)
    assert budget == 1 << 20 and in_use == 0


def test_engine_without_progress_thread_is_driven_by_poll():
    rx = pact.Engine(name="rx-poll", listen="127.0.0.1", model_epoch=1, progress_thread=False)
    tx = pact.Engine(name="tx-poll", listen="127.0.0.1", model_epoch=1)
    try:
        got = {}
        connecting = threading.Thread(target=lambda: got.setdefault("peer", tx.connect(rx.address)))
        connecting.start()
        while connecting.is_alive():  # the handshake needs rx progressed by its caller
            rx.progress(timeout=0.01)
        peer = got["peer"]
        warm(tx, rx, peer)
        x = rx.expect(KEY, [rx.register(bytearray(512))])
        tx.send(peer, KEY, [tx.register(b"p" * 512)])
        [info] = rx.poll(timeout=10)
        assert info.xfer == x.id and info.committed
    finally:
        tx.close()
        rx.close()


def test_trace_records_the_commit(pair):
    tx, rx, peer = pair
    x = rx.expect(KEY, [rx.register(bytearray(64))])
    tx.send(peer, KEY, [tx.register(b"t" * 64)])
    assert x.wait(10).committed
    events = rx.trace()
    assert any(e.key == KEY and e.state == pact.State.COMMITTED and e.role == "receiver"
               for e in events)
    assert rx.trace() == []  # the cursor moved on


def test_group_all_to_all_step_commits():
    a = pact.Engine(name="g0", listen="127.0.0.1", model_epoch=1)
    b = pact.Engine(name="g1", listen="127.0.0.1", model_epoch=1)
    try:
        pa = [a.connect(a.address), a.connect(b.address)]
        pb = [b.connect(a.address), b.connect(b.address)]
        warm(a, b, pa[1])
        chunk = 4096
        bufs = {}
        for rank, e in enumerate((a, b)):
            send = np.full(2 * chunk, rank + 1, dtype=np.uint8)
            recv = np.zeros(2 * chunk, dtype=np.uint8)
            bufs[rank] = (e.register(send), e.register(recv), recv)
        groups = [a.group(7, pa, 0), b.group(7, pb, 1)]
        for rank, g in enumerate(groups):
            ms, mr, _ = bufs[rank]
            g.step(1, 0, [ms.block(r * chunk, chunk) for r in range(2)],
                   [mr.block(r * chunk, chunk) for r in range(2)], deadline=30)
        for g in groups:
            g.wait(timeout=20)
        for rank in range(2):
            recv = bufs[rank][2]
            assert all(recv[r * chunk:(r + 1) * chunk].tolist() == [r + 1] * chunk for r in range(2))
        for g in groups:
            g.close()
    finally:
        a.close()
        b.close()


def test_torch_cpu_tensor_through_dlpack(pair):
    torch = pytest.importorskip("torch", reason="torch is not installed (optional)")
    tx, rx, peer = pair
    src = torch.arange(1024, dtype=torch.float32)
    dst = torch.zeros(1024, dtype=torch.float32)
    x = rx.expect(KEY, [rx.register(dst)])
    tx.send(peer, KEY, [tx.register(src)])
    assert x.wait(10).committed and torch.equal(src, dst)


def test_engine_context_manager_closes_and_memory_outlives_it():
    with pact.Engine(name="ctx") as e:
        m = e.register(bytearray(64))
    assert e.closed
    with pytest.raises(pact.InvalidArgument, match="closed"):
        e.register(bytearray(8))
    with pytest.raises(pact.InvalidArgument, match="closed"):
        e.expect(KEY, [m])
    m.close()  # released with the engine; nothing to do, no error
    assert m.closed


def test_registrations_are_freed_once_their_transfers_are(pair):
    tx, rx, peer = pair
    before, tx_before = counters(rx), counters(tx)
    for i in range(200):
        key = pact.Key(5000 + i, 0, 1)
        x = rx.expect(key, [rx.register(bytearray(256))])
        tx.send(peer, key, [tx.register(b"r" * 256)])
        assert x.wait(10).committed
        del x  # seen final and dropped: released, and its registration with it
    assert counters(rx) == before
    while tx.stats()["tracked_transfers"]:  # dropped sends: released once poll reported them
        assert tx.poll(timeout=5), "sends not final"
    assert counters(tx) == tx_before


def test_disconnect_fails_open_transfers_as_stale_and_tells_the_peer(pair):
    tx, rx, peer = pair
    rx_peer = rx.wait_peer("tx")
    rx.set_credit(0)  # the offer is matched but never advertised: both sides stay open
    x = rx.expect(KEY, [rx.register(bytearray(64))])
    s = tx.send(peer, KEY, [tx.register(b"d" * 64)])
    deadline = time.monotonic() + 10
    while x.query().peer == 0 and time.monotonic() < deadline:  # until the offer matched
        rx.progress(timeout=0.001)
    rx.disconnect(rx_peer, "its lease expired")
    assert isinstance(x.wait(10).error, pact.PeerStale)
    assert isinstance(s.wait(10).error, pact.PeerLost)  # the sender was told
    with pytest.raises(pact.PeerLost, match="its lease expired"):
        rx.send(rx_peer, KEY._replace(transfer_id=9), [rx.register(b"z")])
    with pytest.raises(pact.NotFound):
        rx.disconnect(12345)
    peer2 = tx.connect(rx.address)  # a new connection works
    assert peer2 != peer
