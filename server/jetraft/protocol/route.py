"""The route protocol between cluster members, sans I/O: length-prefixed msgpack frames.

nats-server speaks a text protocol between servers (server/route.go: ``INFO``, ``CONNECT``,
``RS+``/``RS-``, ``RMSG``); jetraft carries the same information as binary frames, so that
payloads, headers and RAFT batches travel without escaping and one parser serves every kind.

A frame on the wire is ``length`` (4 bytes, big-endian, unsigned; the size of what follows)
then one msgpack value, always an array whose first element is the frame kind (an int)::

    [1, {info map}]                                    INFO     identity and discovery
    [2, {"user": str|nil, "password": str|nil}]        CONNECT  credentials (soliciting side)
    [3, code, text]                                    ERR      why a route is refused/closed
    [4]  /  [5]                                        PING / PONG
    [6, account, subject, queue|nil, weight]           SUB      interest added (or re-weighted)
    [7, account, subject, queue|nil]                   UNSUB    interest removed
    [8, account, subject, reply|nil, headers|nil,      MSG      a routed message
        payload, [queue, ...], deliver_as|nil]
    [9, kind, body]                                    APP      opaque frames of other layers
    [10, account, [subject, ...]]                      SUBS     plain interest in many subjects
    [11, account, [subject, ...]]                      UNSUBS   that interest removed

Strings are msgpack str (UTF-8; subjects that came from clients as arbitrary bytes round-trip
through ``surrogateescape``), ``headers``, ``payload`` and ``body`` are msgpack bin. The INFO
map holds ``version`` (int, :data:`VERSION`), ``minor`` (int, :data:`MINOR`; 0 when absent),
``server_name``, ``server_id``, ``cluster``
(str), ``tags`` (list of str), ``jetstream`` (bool), ``listen`` (``"host:port"`` of the route
listener; an empty host means "the address you see me from"), ``routes`` (list of
``"host:port"`` route addresses this server knows: implicit discovery, as nats-server's
route gossip in route.go forwardNewRouteInfoToKnownServers) and ``client_url``
(``"host:port"`` of the client listener, or nil); unknown keys are ignored so later versions
can add fields.

SUBS and UNSUBS (minor 1) are shorthands: ``[10, account, [s1, s2, ...]]`` means exactly the
SUB frames ``[6, account, s1, nil, 1]``, ``[6, account, s2, nil, 1]``... in that order (plain
interest, no queue), UNSUBS likewise the UNSUB frames ``[7, account, s, nil]``; the receiver
applies them all before the frames that follow on the route, and may tell the layers above
once per frame rather than once per subject. The list is never empty; :func:`encode_subs`
cuts a long list into frames of at most :data:`BATCH_SUBJECTS` subjects and
:data:`BATCH_CHARS` characters. They carry a stream's subjects (a JetStream stream leader's
interest: thousands of subjects in one frame instead of thousands of frames).

Versions. ``version`` is compared for equality at the handshake: a peer with another
version is refused (ERR ``protocol``); servers of version 1 already in the field do so, so
``version`` changes only for changes that cannot coexist, and a cluster must then be stopped
whole to upgrade. Frames added since are announced by ``minor`` instead: a server may send a
frame of minor ``n`` only to a peer whose INFO has ``minor`` >= ``n``, and must send the
older equivalent to the others. A server of minor 0 (no ``minor`` key; it ignores unknown INFO
keys) thus keeps receiving SUB/UNSUB frames and never sees a kind it does not know, so a
rolling upgrade keeps every route up. Minor 1 added SUBS and UNSUBS.

MSG semantics (nats-server client.go processMsgResults / processInboundRoutedMsg): the
receiver delivers to every local plain subscriber of ``subject`` and, for each name in
``queues``, to one local member of that queue group; it never forwards the message again (the
cluster is a full mesh). ``deliver_as``, when set, is the subject shown to clients while
``subject`` is used for matching (a JetStream consumer delivery: routed by its deliver subject,
shown with the stored message's subject).

:class:`RouteParser` turns bytes into frame objects and validates every field's type;
anything malformed, of an unknown kind or larger than ``max_frame`` raises
:class:`RouteProtocolError` (the connection is then closed: a peer that sends garbage is not
resynchronised). Imports nothing from jetraft; does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any, Union

import msgpack

from jetraft.protocol.message import Message

__all__ = [
    "ERR_AUTH",
    "ERR_CLUSTER",
    "ERR_DUPLICATE",
    "ERR_NAME",
    "ERR_PROTOCOL",
    "ERR_SELF",
    "ERR_SUPERSEDED",
    "MAX_FRAME",
    "MAX_HANDSHAKE_FRAME",
    "PING",
    "PONG",
    "VERSION",
    "BATCH_CHARS",
    "BATCH_SUBJECTS",
    "MINOR",
    "AppFrame",
    "Frame",
    "RouteConnect",
    "RouteErr",
    "RouteInfo",
    "RouteMsg",
    "RouteParser",
    "RoutePing",
    "RoutePong",
    "RouteProtocolError",
    "RouteSub",
    "RouteSubs",
    "RouteUnsub",
    "RouteUnsubs",
    "decode_frame",
    "encode_app",
    "encode_connect",
    "encode_err",
    "encode_info",
    "encode_msg",
    "encode_sub",
    "encode_subs",
    "encode_unsub",
    "encode_unsubs",
]

#: The protocol version carried in INFO; a peer with another version is refused.
VERSION = 1
#: The frames this server reads beyond version 1's, carried in INFO as ``minor`` (see the
#: module docstring): 1 = SUBS and UNSUBS.
MINOR = 1

#: At most this many subjects, and this many characters of subjects, in one SUBS/UNSUBS frame
#: written by :func:`encode_subs` / :func:`encode_unsubs` (a longer list takes more frames).
BATCH_SUBJECTS = 4096
BATCH_CHARS = 256 * 1024

#: Largest frame accepted by default (bytes after the length prefix): 64 MiB.
MAX_FRAME = 64 * 1024 * 1024
#: Largest frame an accepted connection may send before its handshake (CONNECT with the
#: cluster's credentials, then INFO) is done: 64 KiB, room for an INFO naming thousands of
#: routes. A stranger on the route port can make the server buffer no more than this.
MAX_HANDSHAKE_FRAME = 64 * 1024

K_INFO, K_CONNECT, K_ERR, K_PING, K_PONG, K_SUB, K_UNSUB, K_MSG, K_APP, K_SUBS, K_UNSUBS = range(1, 12)

#: ERR codes: what the refusing side tells the other (and logs in ``route_refused``).
ERR_AUTH = "auth"              # bad or missing cluster credentials
ERR_CLUSTER = "cluster"        # a different cluster name
ERR_SELF = "self"              # the route leads back to this server
ERR_DUPLICATE = "duplicate"    # a route to this server already exists and is kept
ERR_SUPERSEDED = "superseded"  # this route is replaced by another one to the same server
ERR_NAME = "name"              # the remote has this server's own server_name
ERR_PROTOCOL = "protocol"      # malformed frames, wrong version, handshake out of order

_ESC = "surrogateescape"


class RouteProtocolError(Exception):
    """A peer sent bytes that are not a valid route frame; the message says what and where."""


# ---------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """INFO: who a server is and which routes it knows (see the module docstring)."""

    server_name: str
    server_id: str
    cluster: str
    tags: tuple[str, ...] = ()
    jetstream: bool = False
    listen: str = ""
    routes: tuple[str, ...] = ()
    client_url: str | None = None
    version: int = VERSION
    minor: int = 0


@dataclass(frozen=True, slots=True)
class RouteConnect:
    """CONNECT: the soliciting side's credentials (from its route URL), nil when none."""

    user: str | None = None
    password: str | None = None

    def __repr__(self) -> str:  # never print a password
        return f"RouteConnect(user={self.user!r}, password={'[REDACTED]' if self.password else None})"


@dataclass(frozen=True, slots=True)
class RouteErr:
    """ERR: ``code`` is one of the ``ERR_*`` constants, ``text`` a human-readable reason."""

    code: str
    text: str


@dataclass(frozen=True, slots=True)
class RoutePing:
    """PING: answer with PONG (keepalive, nats-server client.go processPingTimer)."""


@dataclass(frozen=True, slots=True)
class RoutePong:
    """PONG: the answer to PING."""


@dataclass(frozen=True, slots=True)
class RouteSub:
    """SUB: the sender has interest in ``subject`` in ``account`` (nats-server ``RS+``).

    For a queue group, ``weight`` is how many members the sender has in it (``RS+ acc subj q
    weight``); a new SUB for the same (account, subject, queue) replaces the weight. Plain
    interest has ``queue`` None and ``weight`` 1.
    """

    account: str
    subject: str
    queue: str | None = None
    weight: int = 1


@dataclass(frozen=True, slots=True)
class RouteUnsub:
    """UNSUB: the sender no longer has interest in (account, subject, queue) (``RS-``)."""

    account: str
    subject: str
    queue: str | None = None


@dataclass(frozen=True, slots=True)
class RouteSubs:
    """SUBS: plain interest in each of ``subjects`` (in order, at least one) in ``account``,
    the same as one :class:`RouteSub` per subject (minor 1, see the module docstring)."""

    account: str
    subjects: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RouteUnsubs:
    """UNSUBS: the same as one :class:`RouteUnsub` (no queue) per subject, in order (minor 1)."""

    account: str
    subjects: tuple[str, ...]


class RouteMsg(Message):
    """MSG: a message routed to the receiver (nats-server ``RMSG``), see the module docstring.

    The frame is itself the :class:`~jetraft.protocol.message.Message` (``subject``,
    ``reply``, ``headers``, ``payload``, ``deliver_as``) the receiver routes, without a
    copy; ``account`` and ``queues`` say where. Never changed once decoded."""

    __slots__ = ("account", "queues")

    def __init__(self, account: str, subject: str, reply: str | None, headers: bytes | None,
                 payload: bytes, queues: tuple[str, ...] = (), deliver_as: str | None = None) -> None:
        self.account = account
        self.subject = subject
        self.reply = reply
        self.headers = headers
        self.payload = payload
        self.queues = queues
        self.deliver_as = deliver_as

    def _key(self) -> tuple:
        return (self.account, self.subject, self.reply, self.headers, self.payload, self.queues,
                self.deliver_as)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "RouteMsg(%r, %r, %r, %r, %r, %r, %r)" % self._key()


@dataclass(frozen=True, slots=True)
class AppFrame:
    """APP: an opaque ``body`` for the handler registered for ``kind`` ("raft", "jsapi"...)."""

    kind: str
    body: bytes


Frame = Union[RouteInfo, RouteConnect, RouteErr, RoutePing, RoutePong, RouteSub, RouteUnsub,
              RouteMsg, AppFrame, RouteSubs, RouteUnsubs]


# ---------------------------------------------------------------- encoding


def _frame(value: list) -> bytes:
    body = msgpack.packb(value, use_bin_type=True, unicode_errors=_ESC)
    return len(body).to_bytes(4, "big") + body


#: Encoded PING and PONG frames.
PING = _frame([K_PING])
PONG = _frame([K_PONG])


def encode_info(info: RouteInfo) -> bytes:
    """The INFO frame for ``info``."""
    return _frame([K_INFO, {
        "version": info.version, "minor": info.minor, "server_name": info.server_name, "server_id": info.server_id,
        "cluster": info.cluster, "tags": list(info.tags), "jetstream": info.jetstream,
        "listen": info.listen, "routes": list(info.routes), "client_url": info.client_url,
    }])


def encode_connect(user: str | None, password: str | None) -> bytes:
    """The CONNECT frame carrying the route URL's credentials (None when it has none)."""
    return _frame([K_CONNECT, {"user": user, "password": password}])


def encode_err(code: str, text: str) -> bytes:
    """An ERR frame: ``code`` one of the ``ERR_*`` constants."""
    return _frame([K_ERR, code, text])


def encode_sub(account: str, subject: str, queue: str | None = None, weight: int = 1) -> bytes:
    """A SUB frame (interest added, or a queue group's new member count)."""
    return _frame([K_SUB, account, subject, queue, weight])


def encode_unsub(account: str, subject: str, queue: str | None = None) -> bytes:
    """An UNSUB frame (interest removed)."""
    return _frame([K_UNSUB, account, subject, queue])


def _encode_batch(kind: int, account: str, subjects: Iterable[str]) -> bytes:
    out: list[bytes] = []
    chunk: list[str] = []
    chars = 0
    for subject in subjects:
        if chunk and (len(chunk) >= BATCH_SUBJECTS or chars + len(subject) > BATCH_CHARS):
            out.append(_frame([kind, account, chunk]))
            chunk, chars = [], 0
        chunk.append(subject)
        chars += len(subject)
    if chunk:
        out.append(_frame([kind, account, chunk]))
    return b"".join(out)


def encode_subs(account: str, subjects: Iterable[str]) -> bytes:
    """SUBS frames for plain interest in each of ``subjects``, in order: one frame per
    :data:`BATCH_SUBJECTS` subjects / :data:`BATCH_CHARS` characters; no bytes for none.
    Only for a peer whose INFO has ``minor`` >= 1; others need :func:`encode_sub` per subject."""
    return _encode_batch(K_SUBS, account, subjects)


def encode_unsubs(account: str, subjects: Iterable[str]) -> bytes:
    """UNSUBS frames: plain interest in each of ``subjects`` removed, in order (as
    :func:`encode_subs`)."""
    return _encode_batch(K_UNSUBS, account, subjects)


def encode_msg(account: str, subject: str, reply: str | None, headers: bytes | None,
               payload: bytes, queues: tuple[str, ...] | list[str] = (),
               deliver_as: str | None = None) -> bytes:
    """A MSG frame. ``headers`` is the raw ``NATS/1.0`` header block or None."""
    value: list[Any] = [K_MSG, account, subject, reply, headers, payload, list(queues)]
    if deliver_as is not None:
        value.append(deliver_as)
    return _frame(value)


def encode_app(kind: str, body: bytes) -> bytes:
    """An APP frame for the layer that registered ``kind``."""
    return _frame([K_APP, kind, body])


# ---------------------------------------------------------------- decoding


def _fail(kind: str, field: str, want: str, got: object) -> RouteProtocolError:
    return RouteProtocolError(f"route frame {kind}: {field}: expected {want}, "
                              f"got {type(got).__name__} {got!r:.60}")


def _str(kind: str, field: str, v: object) -> str:
    if type(v) is not str:
        raise _fail(kind, field, "a string", v)
    return v


def _name(kind: str, field: str, v: object) -> str:
    if type(v) is not str or not v:
        raise _fail(kind, field, "a non-empty string", v)
    return v


def _opt_str(kind: str, field: str, v: object) -> str | None:
    if v is not None and type(v) is not str:
        raise _fail(kind, field, "a string or nil", v)
    return v


def _opt_name(kind: str, field: str, v: object) -> str | None:
    if v is not None and (type(v) is not str or not v):
        raise _fail(kind, field, "a non-empty string or nil", v)
    return v


def _strs(kind: str, field: str, v: object) -> tuple[str, ...]:
    if type(v) is not list or any(type(s) is not str for s in v):
        raise _fail(kind, field, "a list of strings", v)
    return tuple(v)


def _arity(kind: str, row: list, *sizes: int) -> None:
    if len(row) not in sizes:
        want = " or ".join(str(s) for s in sizes)
        raise RouteProtocolError(f"route frame {kind}: expected {want} elements, got {len(row)}")


def _decode_info(row: list) -> RouteInfo:
    _arity("INFO", row, 2)
    m = row[1]
    if type(m) is not dict:
        raise _fail("INFO", "body", "a map", m)
    version = m.get("version")
    if type(version) is not int:
        raise _fail("INFO", "version", "an int", version)
    minor = m.get("minor", 0)
    if type(minor) is not int or not 0 <= minor < 1 << 31:
        raise _fail("INFO", "minor", "an int from 0 to 2**31-1", minor)
    jetstream = m.get("jetstream", False)
    if type(jetstream) is not bool:
        raise _fail("INFO", "jetstream", "a bool", jetstream)
    return RouteInfo(
        server_name=_name("INFO", "server_name", m.get("server_name")),
        server_id=_name("INFO", "server_id", m.get("server_id")),
        cluster=_str("INFO", "cluster", m.get("cluster", "")),
        tags=_strs("INFO", "tags", m.get("tags", [])),
        jetstream=jetstream,
        listen=_str("INFO", "listen", m.get("listen", "")),
        routes=_strs("INFO", "routes", m.get("routes", [])),
        client_url=_opt_str("INFO", "client_url", m.get("client_url")),
        version=version,
        minor=minor,
    )


def _decode_connect(row: list) -> RouteConnect:
    _arity("CONNECT", row, 2)
    m = row[1]
    if type(m) is not dict:
        raise _fail("CONNECT", "body", "a map", m)
    return RouteConnect(_opt_str("CONNECT", "user", m.get("user")),
                        _opt_str("CONNECT", "password", m.get("password")))


def _decode_err(row: list) -> RouteErr:
    _arity("ERR", row, 3)
    return RouteErr(_str("ERR", "code", row[1]), _str("ERR", "text", row[2]))


def _decode_ping(row: list) -> RoutePing:
    _arity("PING", row, 1)
    return _PING


def _decode_pong(row: list) -> RoutePong:
    _arity("PONG", row, 1)
    return _PONG


def _decode_sub(row: list) -> RouteSub:
    _arity("SUB", row, 5)
    weight = row[4]
    if type(weight) is not int or not 1 <= weight < 1 << 31:
        raise _fail("SUB", "weight", "an int from 1 to 2**31-1", weight)
    return RouteSub(_name("SUB", "account", row[1]), _name("SUB", "subject", row[2]),
                    _opt_name("SUB", "queue", row[3]), weight)


def _decode_unsub(row: list) -> RouteUnsub:
    _arity("UNSUB", row, 4)
    return RouteUnsub(_name("UNSUB", "account", row[1]), _name("UNSUB", "subject", row[2]),
                      _opt_name("UNSUB", "queue", row[3]))


def _batch_subjects(kind: str, v: object) -> tuple[str, ...]:
    if type(v) is not list or not v or not all(type(s) is str and s for s in v):
        raise _fail(kind, "subjects", "a non-empty list of non-empty strings", v)
    return tuple(v)


def _decode_subs(row: list) -> RouteSubs:
    _arity("SUBS", row, 3)
    return RouteSubs(_name("SUBS", "account", row[1]), _batch_subjects("SUBS", row[2]))


def _decode_unsubs(row: list) -> RouteUnsubs:
    _arity("UNSUBS", row, 3)
    return RouteUnsubs(_name("UNSUBS", "account", row[1]), _batch_subjects("UNSUBS", row[2]))


def _decode_msg(row: list) -> RouteMsg:
    n = len(row)
    if n == 7 or n == 8:  # fast path: every check of the slow path, inline
        _, account, subject, reply, headers, payload, queues = row[:7]
        deliver_as = row[7] if n == 8 else None
        if (type(account) is str and account and type(subject) is str and subject
                and (reply is None or (type(reply) is str and reply))
                and (headers is None or type(headers) is bytes) and type(payload) is bytes
                and type(queues) is list
                and (deliver_as is None or (type(deliver_as) is str and deliver_as))):
            if not queues:
                return RouteMsg(account, subject, reply, headers, payload, (), deliver_as)
            if all(type(q) is str and q for q in queues):
                return RouteMsg(account, subject, reply, headers, payload, tuple(queues), deliver_as)
    _arity("MSG", row, 7, 8)
    _name("MSG", "account", row[1])
    _name("MSG", "subject", row[2])
    _opt_name("MSG", "reply", row[3])
    if row[4] is not None and type(row[4]) is not bytes:
        raise _fail("MSG", "headers", "bytes or nil", row[4])
    if type(row[5]) is not bytes:
        raise _fail("MSG", "payload", "bytes", row[5])
    if type(row[6]) is not list or any(type(q) is not str or not q for q in row[6]):
        raise _fail("MSG", "queues", "a list of non-empty strings", row[6])
    return RouteMsg(row[1], row[2], row[3], row[4], row[5], tuple(row[6]),
                    _opt_name("MSG", "deliver_as", row[7] if n == 8 else None))


def _decode_app(row: list) -> AppFrame:
    _arity("APP", row, 3)
    body = row[2]
    if type(body) is not bytes:
        raise _fail("APP", "body", "bytes", body)
    return AppFrame(_name("APP", "kind", row[1]), body)


_PING = RoutePing()
_PONG = RoutePong()
_DECODERS = {
    K_INFO: _decode_info, K_CONNECT: _decode_connect, K_ERR: _decode_err, K_PING: _decode_ping,
    K_PONG: _decode_pong, K_SUB: _decode_sub, K_UNSUB: _decode_unsub, K_MSG: _decode_msg,
    K_APP: _decode_app, K_SUBS: _decode_subs, K_UNSUBS: _decode_unsubs,
}


def decode_frame(data: bytes | bytearray | memoryview) -> Frame:
    """Decode one frame's msgpack value (without its length prefix).

    Raises :class:`RouteProtocolError` for bytes that are not exactly one msgpack value, a
    value that is not an array starting with a known kind, or a field of the wrong type.
    """
    try:
        row = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True,
                              unicode_errors=_ESC)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many kinds; all mean malformed
        raise RouteProtocolError(f"route frame: not a msgpack value: {exc}") from None
    if type(row) is not list or not row or type(row[0]) is not int:
        raise RouteProtocolError(f"route frame: expected an array starting with a kind, got {row!r:.60}")
    decoder = _DECODERS.get(row[0])
    if decoder is None:
        raise RouteProtocolError(f"route frame: unknown kind {row[0]}")
    return decoder(row)


class RouteParser:
    """Feed it the bytes read from a route; it returns the complete frames, in order.

    Keeps a partial frame between calls. Raises :class:`RouteProtocolError` as soon as a
    length prefix exceeds ``max_frame`` bytes (before buffering the frame), a length is zero,
    or a frame does not decode; the parser must not be used after that.
    """

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held until more arrive."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """Append ``data``; decode and return every frame now complete (maybe none)."""
        buf = self._buf
        buf += data
        size = len(buf)
        out: list[Frame] = []
        pos = 0
        with memoryview(buf) as view:
            while size - pos >= 4:
                n = int.from_bytes(view[pos:pos + 4], "big")
                if n > self.max_frame:
                    raise RouteProtocolError(f"route frame of {n} bytes exceeds the limit of "
                                             f"{self.max_frame} bytes")
                if n == 0:
                    raise RouteProtocolError("route frame of length 0")
                end = pos + 4 + n
                if end > size:
                    break
                with view[pos + 4:end] as body:
                    out.append(decode_frame(body))
                pos = end
        if pos:
            del buf[:pos]
        return out
