"""Engines that find each other by name (docs/python.md, "Discovery").

A metadata store maps an engine's name to its entry (the metadata blob: name, address, model
epoch), held under a lease that the engine keeps alive. Two backends:

- the embedded store: ``MetaServer`` (an HTTP key/value service with leases, served by any
  process, or by ``pact-meta`` / ``python -m pact.discovery``) and its client ``HttpStore``;
  needs nothing installed;
- etcd v3, through its JSON gateway (``EtcdStore``), for clusters.

``Directory(engine, store)`` publishes the engine, connects to others by name, and watches the
entries of the peers it connected to: an entry that expired (the peer died or hung) or that names
a new epoch or address (the peer restarted) disconnects that peer, so its open transfers end
``pact.PeerStale`` and the next ``connect(name)`` reaches the new incarnation.
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from . import _meta
from ._errors import MetadataError, NotFound

__all__ = ["Directory", "EtcdStore", "HttpStore", "MetaServer", "StoreError", "open_store"]


class StoreError(MetadataError):
    """The metadata store is unreachable or answered something unusable."""

    def __init__(self, message: str):
        super().__init__(-15, message)


# ---- the embedded store ------------------------------------------------------------------------

class MetaServer:
    """The embedded store: keys with optional leases (ttl seconds, refreshed by keepalive) over
    HTTP on host:port (port 0: chosen by the kernel). ``url`` is what clients open."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._lock = threading.Lock()
        self._data: dict[str, tuple[bytes, float | None, float, int]] = {}  # value, ttl, expiry, rev
        self._revision = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _reply(self, code: int, body: bytes = b"", revision: int | None = None):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                if revision is not None:
                    self.send_header("X-Revision", str(revision))
                self.end_headers()
                self.wfile.write(body)

            def _key(self) -> str | None:
                path = urllib.parse.urlsplit(self.path).path
                if not path.startswith("/v1/keys/") or len(path) == len("/v1/keys/"):
                    self._reply(400, b"expected /v1/keys/<key>")
                    return None
                return urllib.parse.unquote(path[len("/v1/keys/"):])

            def do_GET(self):
                if (key := self._key()) is not None:
                    got = server._get(key)
                    self._reply(404) if got is None else self._reply(200, got[0], got[1])

            def do_PUT(self):
                if (key := self._key()) is None:
                    return
                try:
                    ttl = float(self.headers.get("X-TTL", "0"))
                    length = int(self.headers.get("Content-Length", "0"))
                except ValueError:
                    return self._reply(400, b"bad X-TTL or Content-Length")
                if ttl < 0 or length > 1 << 20:
                    return self._reply(400, b"ttl < 0 or value over 1 MiB")
                self._reply(200, b"", server._put(key, self.rfile.read(length), ttl or None))

            def do_POST(self):  # keepalive
                if (key := self._key()) is not None:
                    self._reply(200) if server._keepalive(key) else self._reply(404)

            def do_DELETE(self):
                if (key := self._key()) is not None:
                    server._delete(key)
                    self._reply(200)

        self._http = http.server.ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="pact-meta",
                                        daemon=True)
        self._thread.start()
        self.url = f"http://{host}:{self._http.server_address[1]}"

    def _live(self, key: str, now: float):
        entry = self._data.get(key)
        if entry is not None and entry[1] is not None and entry[2] <= now:
            del self._data[key]  # the lease expired
            return None
        return entry

    def _get(self, key):
        with self._lock:
            entry = self._live(key, time.monotonic())
            return None if entry is None else (entry[0], entry[3])

    def _put(self, key, value, ttl):
        with self._lock:
            self._revision += 1
            expiry = time.monotonic() + ttl if ttl else 0.0
            self._data[key] = (value, ttl, expiry, self._revision)
            return self._revision

    def _keepalive(self, key):
        with self._lock:
            entry = self._live(key, time.monotonic())
            if entry is None:
                return False
            if entry[1] is not None:
                self._data[key] = (entry[0], entry[1], time.monotonic() + entry[1], entry[3])
            return True

    def _delete(self, key):
        with self._lock:
            self._data.pop(key, None)

    def close(self):
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


def _http(method: str, url: str, body: bytes | None = None, headers=None, timeout: float = 5.0):
    """(status, body, headers) of one request; StoreError naming the store when unreachable."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StoreError(f"metadata store {url.split('/v')[0]} unreachable: {reason}") from None


class HttpStore:
    """Client of a MetaServer at url ("http://host:port")."""

    def __init__(self, url: str, timeout: float = 5.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _u(self, key: str) -> str:
        return f"{self.url}/v1/keys/{urllib.parse.quote(key, safe='')}"

    def put(self, key: str, value: bytes, ttl: float) -> None:
        code, body, _ = _http("PUT", self._u(key), value, {"X-TTL": str(ttl)}, self.timeout)
        if code != 200:
            raise StoreError(f"metadata store {self.url}: put {key}: HTTP {code} {body[:200]!r}")

    def keepalive(self, key: str) -> bool:
        code, _, _ = _http("POST", self._u(key), b"", None, self.timeout)
        return code == 200

    def get(self, key: str) -> tuple[bytes, int] | None:
        code, body, headers = _http("GET", self._u(key), None, None, self.timeout)
        if code == 404:
            return None
        if code != 200:
            raise StoreError(f"metadata store {self.url}: get {key}: HTTP {code}")
        return body, int(headers.get("X-Revision", "0"))

    def delete(self, key: str) -> None:
        _http("DELETE", self._u(key), None, None, self.timeout)


# ---- etcd v3 (JSON gateway) --------------------------------------------------------------------

def _b64(b: bytes | str) -> str:
    return base64.b64encode(b.encode() if isinstance(b, str) else b).decode()


class EtcdStore:
    """etcd v3 at url ("http://host:2379"), through its JSON gateway (/v3/...). A key's lease is
    granted with its ttl and kept alive by keepalive(); deleting the key revokes it."""

    def __init__(self, url: str = "http://127.0.0.1:2379", timeout: float = 5.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._leases: dict[str, str] = {}

    def _call(self, path: str, doc: dict) -> dict:
        code, body, _ = _http("POST", self.url + path, json.dumps(doc).encode(),
                              {"Content-Type": "application/json"}, self.timeout)
        try:
            out = json.loads(body or b"{}")
        except json.JSONDecodeError:
            raise StoreError(f"etcd {self.url}{path}: HTTP {code}, not JSON: {body[:200]!r}") from None
        if code != 200 or "error" in out:
            raise StoreError(f"etcd {self.url}{path}: HTTP {code} {out.get('error', out)}")
        return out

    def put(self, key: str, value: bytes, ttl: float) -> None:
        lease = self._call("/v3/lease/grant", {"TTL": max(1, int(round(ttl)))})["ID"]
        self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(value), "lease": lease})
        old = self._leases.pop(key, None)
        self._leases[key] = lease
        if old is not None:
            self._call("/v3/lease/revoke", {"ID": old})

    def keepalive(self, key: str) -> bool:
        lease = self._leases.get(key)
        if lease is None:
            return False
        out = self._call("/v3/lease/keepalive", {"ID": lease})
        return int(out.get("result", {}).get("TTL", 0)) > 0

    def get(self, key: str) -> tuple[bytes, int] | None:
        kvs = self._call("/v3/kv/range", {"key": _b64(key)}).get("kvs", [])
        if not kvs:
            return None
        return base64.b64decode(kvs[0].get("value", "")), int(kvs[0].get("mod_revision", 0))

    def delete(self, key: str) -> None:
        lease = self._leases.pop(key, None)
        if lease is not None:
            self._call("/v3/lease/revoke", {"ID": lease})  # removes the key with it
        else:
            self._call("/v3/kv/deleterange", {"key": _b64(key)})


def open_store(url: str, timeout: float = 5.0):
    """A store by URL: "etcd://host:port" (etcd v3), "http://host:port" (a MetaServer)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "etcd":
        return EtcdStore(f"http://{parts.netloc}", timeout)
    if parts.scheme == "http":
        return HttpStore(url, timeout)
    raise MetadataError(-1, f"metadata store {url!r}: expected etcd://host:port or http://host:port")


# ---- an engine's directory ---------------------------------------------------------------------

class Directory:
    """The engine's presence in a store, lookups by name and the watch over connected peers.

    ttl: the lease (seconds); a dead engine's entry disappears within ttl. The keepalive runs
    every ttl/3 and the watch every watch_interval seconds, so a peer that died, hung or came back
    on a new epoch is disconnected (its transfers end pact.PeerStale) within ttl + watch_interval.
    """

    def __init__(self, engine, store, *, namespace: str = "/pact/engines/", ttl: float = 10.0,
                 watch_interval: float = 0.5):
        if ttl <= 0 or watch_interval <= 0:
            raise MetadataError(-1, "Directory: ttl and watch_interval must be > 0 seconds")
        self.engine, self.store, self.namespace = engine, store, namespace
        self.ttl, self.watch_interval = ttl, watch_interval
        self._lock = threading.Lock()
        self._peers: dict[str, tuple[int, dict]] = {}  # name -> (peer id, the entry connected to)
        self._stop = threading.Event()
        self.disconnects: list[tuple[str, str]] = []  # (name, why), for the application's log
        self.errors: list[str] = []                   # store failures the threads saw
        self._publish()
        self._threads = [threading.Thread(target=self._run, args=(f, i), daemon=True,
                                          name=f"pact-{n}")
                         for f, i, n in ((self._keepalive, ttl / 3, "keepalive"),
                                         (self._watch, watch_interval, "watch"))]
        for t in self._threads:
            t.start()

    def _key(self, name: str) -> str:
        return self.namespace + name

    def _publish(self):
        self.store.put(self._key(self.engine.name), self.engine.export_metadata(), self.ttl)

    def set_epoch(self, model_epoch: int) -> None:
        """Moves the engine to a new epoch and publishes it (peers watching drop old state)."""
        self.engine.set_epoch(model_epoch)
        self._publish()

    def connected(self, name: str) -> dict | None:
        """The entry of name this directory is connected to (None: not connected), as connect
        last checked it; no store read."""
        with self._lock:
            known = self._peers.get(name)
        return None if known is None else known[1]

    def lookup(self, name: str) -> dict | None:
        """The entry of the engine called name, None when there is none (or it expired)."""
        got = self.store.get(self._key(name))
        return None if got is None else _meta.parse_metadata(got[0])

    def connect(self, name: str, timeout: float = 10.0) -> int:
        """Waits up to timeout for name's entry, connects, and watches it; returns the peer id.
        pact.NotFound when nobody registered the name in time."""
        deadline = time.monotonic() + timeout
        with self._lock:
            known = self._peers.get(name)
        entry = self.lookup(name)
        if known is not None:
            if entry is not None and _same_incarnation(entry, known[1]):
                return known[0]  # still the incarnation connected to
            self._drop(name, known[0], "its metadata-store entry changed or expired")
        while entry is None:
            if time.monotonic() >= deadline:
                raise NotFound(-3, f"no engine named {name!r} in the metadata store "
                                   f"({self.namespace}) within {timeout} s")
            self._stop.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            entry = self.lookup(name)
        peer = self.engine.connect(entry["address"], timeout=max(0.1, deadline - time.monotonic()))
        with self._lock:
            self._peers[name] = (peer, entry)
        return peer

    def _run(self, step, interval):
        while not self._stop.wait(interval):
            try:
                step()
            except Exception as e:  # noqa: BLE001  (a thread must not die; recorded, retried)
                self.errors.append(str(e))

    def _keepalive(self):
        if not self.store.keepalive(self._key(self.engine.name)):
            self._publish()  # expired meanwhile (the store restarted, a long pause): again

    def _watch(self):
        with self._lock:
            peers = list(self._peers.items())
        for name, (peer, entry) in peers:
            now = self.lookup(name)
            if now is None:
                self._drop(name, peer, f"its entry in the metadata store expired (lease of {name})")
            elif not _same_incarnation(now, entry):
                self._drop(name, peer, f"it restarted: the metadata store names epoch "
                                       f"{now['model_epoch']} at {now['address']}, connected to "
                                       f"epoch {entry['model_epoch']} at {entry['address']}")

    def forget(self, name: str, why: str = "forgotten by the application") -> None:
        """Drops the connection to name (if any); the next connect(name) looks it up anew."""
        with self._lock:
            known = self._peers.get(name)
        if known is not None:
            self._drop(name, known[0], why)

    def _drop(self, name: str, peer: int, why: str) -> None:
        with self._lock:
            if self._peers.get(name, (None,))[0] != peer:
                return  # dropped already
            del self._peers[name]
        self.disconnects.append((name, why))
        try:
            self.engine.disconnect(peer, why)
        except Exception as e:  # noqa: BLE001  (the engine closed meanwhile)
            self.errors.append(str(e))

    def close(self) -> None:
        """Stops the threads and removes the entry at once (peers see it gone)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        try:
            self.store.delete(self._key(self.engine.name))
        except StoreError as e:
            self.errors.append(str(e))

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


def _same_incarnation(a: dict, b: dict) -> bool:
    return a["model_epoch"] == b["model_epoch"] and a["address"] == b["address"]


def main(argv=None) -> int:
    """pact-meta: serves the embedded metadata store until interrupted."""
    ap = argparse.ArgumentParser(prog="pact-meta", description=main.__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=7070)
    args = ap.parse_args(argv)
    server = MetaServer(args.host, args.port)
    print(f"pact-meta: serving {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
