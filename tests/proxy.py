"""A TCP proxy in front of the test database that tests can break on purpose.

Worker processes started with :func:`proxied_env` connect through it. It can:

* go ``down``: close every connection and refuse new ones (the database "went away"), and come back;
* ``cut_after_claim()``: let the next claim statement run and commit, then close that connection
  before its reply reaches the worker (a reply lost on the way back).

It speaks just enough of the PostgreSQL protocol for the second: it declines TLS itself (so it can
read the messages; the clients use ``sslmode=prefer``) and watches the client's Parse, Bind and Query
messages for the claim statement, and the server's ReadyForQuery that follows it. It only ever
touches connections that were made through it: never the server, never anyone else's session.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection

#: Text only the claim statements contain.
CLAIM_MARKER = b"claim_token = nextval("
SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104


class Proxy:
    def __init__(self, upstream: tuple[str, int] | str) -> None:
        self.upstream = upstream  # (host, port) or a unix socket path
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._down = False
        self._cut_armed = False
        self.cuts = 0  # claim replies cut so far
        self.refused = 0  # connections refused while down
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- controls -----------------------------------------------------------------------------------
    def down(self) -> None:
        """Close every proxied connection and refuse new ones until :meth:`up`."""
        with self._lock:
            self._down = True
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            _close(client, server)

    def up(self) -> None:
        with self._lock:
            self._down = False

    def cut_after_claim(self) -> None:
        """The next claim runs and commits; its connection is closed before the reply."""
        with self._lock:
            self._cut_armed = True

    def close(self) -> None:
        self._closed = True
        self.down()
        self._listener.close()

    # -- plumbing -----------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
            if down:
                self.refused += 1
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.upstream)
        else:
            server = socket.create_connection(self.upstream)
        return server

    def _serve(self, client: socket.socket) -> None:
        try:
            startup = self._negotiate(client)
            if startup is None:
                client.close()
                return
            server = self._connect_upstream()
        except OSError:
            client.close()
            return
        with self._lock:
            if self._down:
                _close(client, server)
                return
            self._pairs.append((client, server))
        state = {"claim_sent": False, "claim_statements": set()}
        server.sendall(startup)
        threading.Thread(target=self._client_to_server, args=(client, server, state), daemon=True).start()
        self._server_to_client(client, server, state)

    def _negotiate(self, client: socket.socket) -> bytes | None:
        """Decline TLS and GSS encryption ourselves; return the startup message to forward."""
        while True:
            head = _read(client, 8)
            if head is None:
                return None
            length, code = struct.unpack("!ii", head)
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                client.sendall(b"N")
                continue
            rest = _read(client, length - 8)
            return None if rest is None else head + rest

    def _client_to_server(self, client: socket.socket, server: socket.socket, state: dict[str, Any]) -> None:
        try:
            for kind, message in _messages(client):
                if kind == b"P":  # Parse: name \0 query \0 ...
                    name, _, rest = message[5:].partition(b"\0")
                    if CLAIM_MARKER in rest:
                        state["claim_statements"].add(name)
                    else:  # a new statement under that name (the unnamed one is reused)
                        state["claim_statements"].discard(name)
                elif kind == b"B":  # Bind: portal \0 statement \0 ...
                    _, _, rest = message[5:].partition(b"\0")
                    statement, _, _ = rest.partition(b"\0")
                    if statement in state["claim_statements"]:
                        self._claim_seen(state)
                elif kind == b"Q" and CLAIM_MARKER in message:
                    self._claim_seen(state)
                server.sendall(message)
        except OSError:
            pass
        finally:
            _close(client, server)

    def _claim_seen(self, state: dict[str, Any]) -> None:
        with self._lock:
            if self._cut_armed:
                self._cut_armed = False
                state["claim_sent"] = True

    def _server_to_client(self, client: socket.socket, server: socket.socket, state: dict[str, Any]) -> None:
        try:
            for kind, message in _messages(server):
                if kind == b"Z" and state["claim_sent"]:
                    # The claim ran and committed (ReadyForQuery after it): lose the reply.
                    self.cuts += 1
                    break
                client.sendall(message)
        except OSError:
            pass
        finally:
            _close(client, server)


def _messages(sock: socket.socket) -> Iterator[tuple[bytes, bytes]]:
    """Typed protocol messages (type byte, then a length that counts itself): (type, whole message)."""
    while True:
        head = _read(sock, 5)
        if head is None:
            return
        length = struct.unpack("!i", head[1:5])[0]
        body = _read(sock, length - 4)
        if body is None:
            return
        yield head[:1], head + body


def _read(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 65536))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


@contextmanager
def database_proxy() -> Iterator[Proxy]:
    """A proxy in front of the test database's server, closed afterwards."""
    s = connection.settings_dict
    host, port = s["HOST"] or "", int(s["PORT"] or 5432)
    upstream: tuple[str, int] | str
    if not host or host.startswith("/"):  # a unix socket directory (the embedded server's)
        upstream = f"{host or '/var/run/postgresql'}/.s.PGSQL.{port}"
    else:
        upstream = (host, port)
    proxy = Proxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()


def proxied_env(proxy: Proxy, **extra: str) -> dict[str, str]:
    """Environment for a worker process that reaches the test database through ``proxy``."""
    from tests.processes import worker_env

    return worker_env(PGJOBS_WORKER_DB_HOST="127.0.0.1", PGJOBS_WORKER_DB_PORT=str(proxy.port), **extra)
