"""The NATS client protocol, sans I/O: a parser for what clients send and encoders for what we send.

Client -> server: ``CONNECT``, ``PUB``, ``HPUB``, ``SUB``, ``UNSUB``, ``PING``,
``PONG`` (plus ``INFO``, ``+OK`` and ``-ERR``, which nats-server tolerates from
clients). Server -> client: ``INFO``, ``MSG``, ``HMSG``, ``PING``, ``PONG``,
``+OK``, ``-ERR``.

The behaviour is nats-server's (``server/parser.go``, ``server/client.go``
``processPub``/``processHeaderPub``/``parseSub``/``processUnsub``/
``processConnect``, ``server/util.go`` ``parseSize``), checked against a
running nats-server 2.15.1, and what nats-py sends (``nats/protocol/command.py``)
and expects (``nats/protocol/parser.py``).

Subjects, reply subjects, queue names and sids are ``str`` decoded from the
wire bytes with ``utf-8`` + ``surrogateescape`` and encoded back the same way,
so they round-trip byte-exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from jetraft.protocol.message import Message
from jetraft.protocol.subjects import is_valid_filter_tokens

__all__ = [
    "ERR_AUTHORIZATION_VIOLATION",
    "ERR_BAD_CLIENT_PROTOCOL",
    "ERR_INVALID_PUBLISH_SUBJECT",
    "ERR_INVALID_SUBJECT",
    "ERR_MAX_CONTROL_LINE",
    "ERR_MAX_PAYLOAD",
    "ERR_NO_RESPONDERS_HEADERS",
    "ERR_UNKNOWN_OP",
    "NO_RESPONDERS_HEADERS",
    "OK",
    "PING",
    "PONG",
    "ClientParser",
    "Command",
    "Connect",
    "Ping",
    "Pong",
    "ProtocolViolation",
    "Pub",
    "Sub",
    "Unsub",
    "encode_err",
    "encode_info",
    "encode_msg",
    "no_responders_headers",
    "status_headers",
]

_ENC = "utf-8"
_ESC = "surrogateescape"

# -ERR texts, byte for byte what nats-server 2.15 sends.
ERR_UNKNOWN_OP = "Unknown Protocol Operation"  # parser.go parseErr
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"  # errors.go ErrMaxControlLine
ERR_MAX_PAYLOAD = "Maximum Payload Violation"  # client.go maxPayloadViolation
ERR_INVALID_SUBJECT = "Invalid Subject"  # client.go processSubEx
ERR_INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"  # client.go processPub (pedantic)
ERR_BAD_CLIENT_PROTOCOL = "invalid client protocol"  # errors.go ErrBadClientProtocol
ERR_NO_RESPONDERS_HEADERS = "no responders requires headers support"  # errors.go
ERR_AUTHORIZATION_VIOLATION = "Authorization Violation"  # client.go authViolation


# ---------------------------------------------------------------- commands


@dataclass(slots=True)
class Connect:
    """``CONNECT <json>``: the client's options as a dict.

    Keys with a JSON ``null`` value are dropped (Go's decoder leaves the field
    at its default). Defaults for absent keys are the server's business:
    nats-server uses verbose=True, pedantic=True, echo=True (client.go
    ``defaultOpts``); nats-py always sends verbose and pedantic.
    """

    options: dict


#: ``PUB`` or ``HPUB``: the parser yields each as the :class:`~jetraft.protocol.message.Message`
#: the server routes (``deliver_as`` is always None here).
Pub = Message


@dataclass(slots=True)
class Sub:
    """``SUB <subject> [queue] <sid>``."""

    subject: str
    queue: str | None
    sid: str


@dataclass(slots=True)
class Unsub:
    """``UNSUB <sid> [max_msgs]``.

    ``max_msgs`` is a positive int (unsubscribe after that many messages in
    total) or None (unsubscribe now). As in nats-server ``processUnsub``, a
    max of 0 or one that is not a number means "now", not an error.
    """

    sid: str
    max_msgs: int | None


@dataclass(slots=True)
class Ping:
    """``PING``: answer with :data:`PONG`."""


@dataclass(slots=True)
class Pong:
    """``PONG``: the answer to our PING."""


@dataclass(slots=True)
class ProtocolViolation:
    """Input the server must react to with an error.

    ``message``: when ``send_err`` is True, the -ERR text nats-server sends,
    without quotes (send it with :func:`encode_err`); when False,
    nats-server sends nothing and only logs, and ``message`` is that log text.
    ``fatal``: close the connection (after sending the -ERR, if any). After a
    fatal violation the parser ignores all further input.

    The cases (nats-server 2.15 behaviour, probed on the wire):

    =========================================================  =====  ========
    condition                                                   fatal  send_err
    =========================================================  =====  ========
    unknown verb, bad byte in a verb, payload not followed by   yes    yes
    CRLF, ``PUB\\r\\n``, MSG/HMSG from a client: ERR_UNKNOWN_OP
    control line argument > max_control_line:                   yes    yes
    ERR_MAX_CONTROL_LINE
    PUB/HPUB size > max_payload: ERR_MAX_PAYLOAD                yes    yes
    CONNECT protocol not 0 or 1: "invalid client protocol"      yes    yes
    CONNECT no_responders without headers                       yes    yes
    ``awaiting_auth`` and a command other than CONNECT:         yes    yes
    ERR_AUTHORIZATION_VIOLATION
    SUB with an empty token or a token after ``>``:             no     yes
    ERR_INVALID_SUBJECT (the Sub is not emitted)
    pedantic and the PUB subject is not a valid literal:        no     yes
    ERR_INVALID_PUBLISH_SUBJECT (the Pub is still emitted)
    wrong argument count, bad or > 9-digit size, HPUB header    yes    no
    size > total size, CONNECT/INFO not a JSON object or a
    known CONNECT field of the wrong type, ``-ERR`` from a
    client
    =========================================================  =====  ========

    ``sid``: for ERR_INVALID_SUBJECT, the SUB's sid (nats-server checks whether the sid is
    taken before it checks the subject: a SUB on a taken sid is ignored whatever its
    subject); None otherwise. It takes no part in comparisons.
    """

    message: str
    fatal: bool
    send_err: bool = True
    sid: str | None = field(default=None, compare=False)


Command = Union[Connect, Pub, Sub, Unsub, Ping, Pong, ProtocolViolation]


# ---------------------------------------------------------------- parser

# Verb kinds. ARG: verb, one or more spaces/tabs, arguments. JSON: verb,
# optional spaces/tabs, argument (CONNECT{} is accepted). SKIP: everything
# after the verb up to LF is ignored (parser.go OP_PING, OP_PONG, OP_PLUS_OK).
_ARG, _JSON, _SKIP = 0, 1, 2
_VERBS: tuple[tuple[bytes, int], ...] = (
    (b"PUB", _ARG),
    (b"HPUB", _ARG),
    (b"PING", _SKIP),
    (b"PONG", _SKIP),
    (b"SUB", _ARG),
    (b"UNSUB", _ARG),
    (b"CONNECT", _JSON),
    (b"INFO", _JSON),
    (b"+OK", _SKIP),
    (b"-ERR", _ARG),
)
_PUB = _VERBS[0]
_VERB_HEAD = max(len(v) for v, _ in _VERBS)
_LF, _VT, _FF, _CR = 10, 11, 12, 13
_C = b"Cc"  # the first byte of CONNECT
_SPACE_TAB = b" \t"
_MAX_SIZE_DIGITS = 9  # util.go parseSize: at most 9 digits ("999M")
_INT64_MAX = 2**63 - 1
# CONNECT fields nats-server decodes into typed struct fields (client.go ClientOpts).
_BOOL_FIELDS = frozenset(
    ("echo", "verbose", "pedantic", "tls_required", "new_account", "headers", "no_responders")
)
_STR_FIELDS = frozenset(
    ("nkey", "jwt", "sig", "auth_token", "user", "pass", "name", "lang", "version", "account",
     "remote_account", "proxy_sig")
)
_OBJ_FIELDS = frozenset(("import", "export"))


def _match_verb(head: bytes) -> tuple[bytes, int] | None:
    upper = head.upper()
    for verb, kind in _VERBS:
        if upper.startswith(verb):
            return verb, kind
    return None


def _could_be_verb(head: bytes) -> bool:
    upper = head.upper()
    return any(verb.startswith(upper) for verb, _ in _VERBS)


def _split(arg: bytes, cr_splits: bool) -> list[bytes]:
    """Split on runs of spaces/tabs (and CR when ``cr_splits``), as client.go does.

    ``bytes.split()`` also splits on VT, FF and CR; nats-server's PUB splitter
    only on space and tab, its SUB/UNSUB splitter (``splitArg``) also on CR/LF.
    (``int in bytes`` is a memchr, much faster than ``bytes in bytes``.)
    """
    if _VT in arg or _FF in arg or (not cr_splits and _CR in arg):
        arg = arg.replace(b"\t", b" ")
        if cr_splits:
            arg = arg.replace(b"\r", b" ")
        return [a for a in arg.split(b" ") if a]
    return arg.split()


def _size(b: bytes) -> int:
    """util.go parseSize: 1..9 ASCII digits, else -1."""
    if len(b) <= _MAX_SIZE_DIGITS and b.isdigit():
        return int(b)
    return -1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def _load_json_object(arg: bytes) -> dict | None:
    """Decode a CONNECT/INFO argument as Go's json.Unmarshal into a struct would.

    Returns the dict (``{}`` for ``null``) or None if Go would fail: not JSON,
    NaN/Infinity, or not an object.
    """
    try:
        value = json.loads(arg.decode(_ENC, "replace"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if value is None:
        return {}
    return value if isinstance(value, dict) else None


def _connect_field_error(options: dict) -> str | None:
    """The first known CONNECT field whose JSON type Go would refuse, or None."""
    for key, value in options.items():
        if value is None:  # Go leaves the field unchanged
            continue
        if key in _BOOL_FIELDS:
            ok = isinstance(value, bool)
        elif key in _STR_FIELDS:
            ok = isinstance(value, str)
        elif key == "protocol":
            ok = type(value) is int and -_INT64_MAX - 1 <= value <= _INT64_MAX
        elif key in _OBJ_FIELDS:
            ok = isinstance(value, dict)
        else:
            continue
        if not ok:
            return key
    return None


def _pedantic_subject_ok(subject: str) -> bool:
    """client.go IsValidLiteralSubject: no empty token and no ``*``/``>`` token."""
    tokens = subject.split(".")
    return "" not in tokens and "*" not in tokens and ">" not in tokens


class ClientParser:
    """Incremental parser for the bytes a NATS client sends (nats-server ``server/parser.go``).

    ``feed(data)`` takes any chunk of the stream (a command may be split
    across any number of feeds; a feed may hold many commands) and returns
    the commands completed so far, in order, as :class:`Connect`,
    :class:`Pub`, :class:`Sub`, :class:`Unsub`, :class:`Ping`, :class:`Pong`
    and :class:`ProtocolViolation`. It never raises. After a fatal violation
    it returns that violation and then ``[]`` for all further input.

    Tolerated like nats-server: verbs in any case; runs of spaces/tabs
    between arguments (``PUB foo  5``, ``UNSUB 1 ``); control lines ended by
    ``\\n`` as well as ``\\r\\n`` (a payload must be followed by ``\\r\\n``);
    anything between ``PING``/``PONG``/``+OK`` and the end of the line;
    ``INFO`` and ``+OK`` from the client, which are ignored.

    ``max_control_line`` (bytes) bounds the arguments of a control line,
    verb and separating blanks excluded (parser.go ``overMaxControlLineLimit``);
    it is enforced on a partial line too, so an endless line cannot
    exhaust memory. ``max_payload`` (bytes, settable, negative = no limit)
    bounds a PUB's size or an HPUB's total size. ``awaiting_auth`` (settable,
    default False): the server requires authentication, so the first command
    must be CONNECT; anything else is refused as soon as its first byte is seen
    (a fatal ``Authorization Violation``), before any of its arguments or
    payload is buffered (nats-server parser.go ``authErr``). It clears itself
    when a CONNECT is parsed. ``pedantic`` (settable)
    makes a PUB to a subject that is not a valid literal draw a non-fatal
    ``Invalid Publish Subject``; the parser itself sets it from each valid
    CONNECT the way nats-server does (an absent ``pedantic`` means True on
    the first CONNECT and "unchanged" on later ones). It starts False,
    whereas nats-server is pedantic until the first CONNECT.

    Differences from nats-server, all for input no client sends: ``HMSG``
    from a client is an unknown operation (nats-server half-parses it); a
    CR inside a control line is kept as data rather than dropping the
    preceding byte; ``PUB \\n`` ends the line rather than swallowing the LF.
    Whether the client may send HPUB at all (it asked for ``headers``) is
    for the caller to check on each Pub with headers.

    Performance: lines are found with ``bytes.find``, payloads are sliced,
    and a payload that spans feeds is collected as a list of chunks joined
    once, so cost is linear in the input.
    """

    __slots__ = (
        "_buf",
        "_chunks",
        "_connected",
        "_dead",
        "_have",
        "_p_hdr",
        "_p_reply",
        "_p_size",
        "_p_subject",
        "awaiting_auth",
        "max_control_line",
        "max_payload",
        "pedantic",
    )

    def __init__(self, *, max_control_line: int = 4096, max_payload: int = 1048576) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self.pedantic = False
        self.awaiting_auth = False
        self._buf = b""  # unparsed bytes (a partial control line, or the start of a payload)
        self._chunks: list[bytes] = []  # a payload spanning feeds, joined once complete
        self._have = 0  # bytes in _chunks
        self._dead = False
        self._connected = False
        # The PUB/HPUB whose payload is awaited; _p_size < 0 when none.
        self._p_subject = ""
        self._p_reply: str | None = None
        self._p_hdr = 0
        self._p_size = -1

    @property
    def buffered_bytes(self) -> int:
        """Bytes of input held for a later :meth:`feed`: a partial control line, or the part
        of a payload received so far (0 when none; always 0 after a fatal violation)."""
        return len(self._buf) + sum(len(chunk) for chunk in self._chunks)

    def feed(self, data: bytes) -> list[Command]:
        """Parse ``data`` (bytes-like) and return the commands it completes. Never raises."""
        if self._dead:
            return []
        if self._chunks:
            before = self._have
            self._chunks.append(bytes(data))
            self._have += len(data)
            if self._have < self._p_size + 2:
                # the byte after the payload arrived without its LF: fail as soon as it is
                # not CR, as a whole read would (parser.go)
                if before <= self._p_size < self._have and data[self._p_size - before] != _CR:
                    out: list[Command] = []
                    self._fatal(out, ERR_UNKNOWN_OP)
                    return out
                return []
            buf = b"".join(self._chunks)
            self._chunks = []
            self._have = 0
        elif self._buf:
            buf = self._buf + data
        else:
            buf = bytes(data)
        out: list[Command] = []
        try:
            self._parse(buf, out)
        except Exception as exc:  # defensive: feed must never raise
            self._fatal(out, f"internal parser error: {exc!r}", send_err=False)
        return out

    def _fatal(self, out: list[Command], message: str, send_err: bool = True) -> int:
        """Record a fatal violation and stop parsing for good; returns -1 (the "stop" position)."""
        out.append(ProtocolViolation(message, True, send_err))
        self._dead = True
        self._buf = b""
        self._chunks = []
        self._p_size = -1
        return -1

    def _await_payload(self, buf: bytes, start: int) -> None:
        self._buf = b""
        self._chunks = [buf[start:]]
        self._have = len(buf) - start

    def _parse(self, buf: bytes, out: list[Command]) -> None:
        n = len(buf)
        pos = 0
        find = buf.find
        append = out.append
        while pos < n:
            size = self._p_size
            if size >= 0:  # the payload of the PUB/HPUB whose control line _pub accepted
                end = pos + size
                if end + 2 > n:
                    if end < n and buf[end] != _CR:  # fail as soon as the CR is missing, as parser.go
                        self._fatal(out, ERR_UNKNOWN_OP)
                        return
                    self._await_payload(buf, pos)
                    return
                if buf[end] != _CR or buf[end + 1] != _LF:
                    self._fatal(out, ERR_UNKNOWN_OP)
                    return
                hdr = self._p_hdr
                if hdr > 0:
                    append(Pub(self._p_subject, self._p_reply, buf[pos : pos + hdr], buf[pos + hdr : end]))
                else:
                    append(Pub(self._p_subject, self._p_reply, None, buf[pos:end]))
                self._p_size = -1
                pos = end + 2
                continue

            if self.awaiting_auth and buf[pos] not in _C:
                self._fatal(out, ERR_AUTHORIZATION_VIOLATION)
                return
            nl = find(b"\n", pos)
            if nl < 0:
                self._partial(buf, pos, out)
                return
            end = nl - 1 if nl > pos and buf[nl - 1] == _CR else nl

            pos = self._line(buf, pos, end, nl, out)
            if pos < 0:
                return
        self._buf = b""

    def _line(self, buf: bytes, pos: int, end: int, nl: int, out: list[Command]) -> int:
        """Handle the control line ``buf[pos:end]``; return where parsing resumes, -1 to stop."""
        if buf.startswith(b"PUB ", pos):  # the hot path: skip the verb search
            found: tuple[bytes, int] | None = _PUB
        else:
            found = _match_verb(buf[pos : min(end, pos + _VERB_HEAD)])
        if found is None:
            return self._fatal(out, ERR_UNKNOWN_OP)
        verb, kind = found
        after = pos + len(verb)
        if kind == _SKIP:
            if verb == b"PING":
                out.append(Ping())
            elif verb == b"PONG":
                out.append(Pong())
            return nl + 1
        if kind == _ARG and (after >= end or buf[after] not in _SPACE_TAB):
            return self._fatal(out, ERR_UNKNOWN_OP)
        arg = buf[after:end].lstrip(_SPACE_TAB)
        if len(arg) > self.max_control_line:
            return self._fatal(out, ERR_MAX_CONTROL_LINE)
        if verb == b"PUB" or verb == b"HPUB":
            return self._pub(arg, verb == b"HPUB", nl + 1, out)
        if verb == b"SUB":
            ok = self._sub(arg, out)
        elif verb == b"UNSUB":
            ok = self._unsub(arg, out)
        elif verb == b"CONNECT":
            ok = self._connect(arg, out)
        elif verb == b"INFO":
            ok = _load_json_object(arg) is not None
            if not ok:
                self._fatal(out, "INFO: invalid JSON", send_err=False)
        else:  # -ERR: nats-server logs it and closes the connection (client.go processErr)
            self._fatal(out, f"Client Error {arg.decode(_ENC, 'replace')}", send_err=False)
            ok = False
        return nl + 1 if ok else -1

    def _pub(self, arg: bytes, has_headers: bool, start: int, out: list[Command]) -> int:
        """PUB/HPUB arguments (client.go processPub/processHeaderPub); the payload is read by _parse."""
        args = _split(arg, False)
        nargs = len(args)
        reply = None
        if has_headers:
            if nargs == 3:
                subj, hdb, szb = args
            elif nargs == 4:
                subj, reply_b, hdb, szb = args
                reply = reply_b.decode(_ENC, _ESC)
            else:
                return self._fatal(out, "processHeaderPub Parse Error", send_err=False)
            hdr = _size(hdb)
            size = _size(szb)
            if hdr < 0:
                return self._fatal(out, "processHeaderPub Bad or Missing Header Size", send_err=False)
            if size < 0:
                return self._fatal(out, "processHeaderPub Bad or Missing Total Size", send_err=False)
            if hdr > size:
                return self._fatal(out, "processHeaderPub Header Size larger then TotalSize", send_err=False)
        else:
            if nargs == 2:
                subj, szb = args
            elif nargs == 3:
                subj, reply_b, szb = args
                reply = reply_b.decode(_ENC, _ESC)
            else:
                return self._fatal(out, "processPub Parse Error", send_err=False)
            hdr = 0
            size = _size(szb)
            if size < 0:
                return self._fatal(out, "processPub Bad or Missing Size", send_err=False)
        if 0 <= self.max_payload < size:
            return self._fatal(out, ERR_MAX_PAYLOAD)
        subject = subj.decode(_ENC, _ESC)
        if self.pedantic and not _pedantic_subject_ok(subject):
            out.append(ProtocolViolation(ERR_INVALID_PUBLISH_SUBJECT, False))
        # The payload is consumed by the main loop's pending-payload branch.
        self._p_subject, self._p_reply, self._p_hdr, self._p_size = subject, reply, hdr, size
        return start

    def _sub(self, arg: bytes, out: list[Command]) -> bool:
        args = _split(arg, True)
        if len(args) == 2:
            subj, sid = args
            queue = None
        elif len(args) == 3:
            subj, queue_b, sid = args
            queue = queue_b.decode(_ENC, _ESC)
        else:
            self._fatal(out, "processSub Parse Error", send_err=False)
            return False
        subject = subj.decode(_ENC, _ESC)
        if is_valid_filter_tokens(subject.split(".")):
            out.append(Sub(subject, queue, sid.decode(_ENC, _ESC)))
        else:
            out.append(ProtocolViolation(ERR_INVALID_SUBJECT, False, sid=sid.decode(_ENC, _ESC)))
        return True

    def _unsub(self, arg: bytes, out: list[Command]) -> bool:
        args = _split(arg, True)
        if len(args) == 1:
            max_msgs = None
        elif len(args) == 2:
            max_msgs = _size(args[1])
            if max_msgs <= 0:
                max_msgs = None
        else:
            self._fatal(out, "processUnsub Parse Error", send_err=False)
            return False
        out.append(Unsub(args[0].decode(_ENC, _ESC), max_msgs))
        return True

    def _connect(self, arg: bytes, out: list[Command]) -> bool:
        options = _load_json_object(arg)
        if options is None:
            self._fatal(out, "CONNECT: invalid JSON", send_err=False)
            return False
        bad = _connect_field_error(options)
        if bad is not None:
            self._fatal(out, f"CONNECT: invalid type for field {bad!r}", send_err=False)
            return False
        options = {k: v for k, v in options.items() if v is not None}
        if not 0 <= options.get("protocol", 0) <= 1:
            self._fatal(out, ERR_BAD_CLIENT_PROTOCOL)
            return False
        if options.get("no_responders") and not options.get("headers"):
            self._fatal(out, ERR_NO_RESPONDERS_HEADERS)
            return False
        self.pedantic = bool(options.get("pedantic", self.pedantic if self._connected else True))
        self._connected = True
        self.awaiting_auth = False
        out.append(Connect(options))
        return True

    def _partial(self, buf: bytes, pos: int, out: list[Command]) -> None:
        """No LF yet in ``buf[pos:]``: fail early as nats-server would, else keep it (compacted)."""
        n = len(buf)
        head = buf[pos : pos + _VERB_HEAD]
        found = _match_verb(head)
        if found is None:
            if _could_be_verb(head):
                self._buf = buf[pos:]
            else:
                self._fatal(out, ERR_UNKNOWN_OP)
            return
        verb, kind = found
        after = pos + len(verb)
        if after == n:
            self._buf = buf[pos:]
            return
        if kind == _SKIP:
            # Everything up to LF is ignored: keep only the verb (and a CR, harmless).
            self._buf = buf[pos:after]
            return
        if kind == _ARG and buf[after] not in _SPACE_TAB:
            self._fatal(out, ERR_UNKNOWN_OP)
            return
        rest = buf[after:]
        arg = rest.lstrip(_SPACE_TAB)
        if not arg:
            # Only blanks so far: keep one, so a flood of blanks cannot grow the buffer.
            self._buf = buf[pos : after + 1]
            return
        arg_len = len(arg) - (1 if arg[-1] == _CR else 0)
        if arg_len > self.max_control_line:
            self._fatal(out, ERR_MAX_CONTROL_LINE)
            return
        self._buf = buf[pos:after] + b" " + arg if len(arg) < len(rest) else buf[pos:]


# ---------------------------------------------------------------- encoders

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"


def encode_info(info: Mapping[str, Any]) -> bytes:
    """``INFO <compact json>\\r\\n`` (nats-server server.go generateInfoJSON).

    Non-ASCII is written as UTF-8. Raises TypeError/ValueError if ``info``
    is not JSON-serialisable.
    """
    return b"INFO " + json.dumps(info, separators=(",", ":"), ensure_ascii=False).encode(_ENC) + b"\r\n"


def encode_msg(
    subject: str, sid: str, reply: str | None, payload: bytes, headers: bytes | None = None
) -> bytes:
    """One delivery: ``MSG <subject> <sid> [reply] <size>\\r\\n<payload>\\r\\n``.

    With a non-empty ``headers`` block: ``HMSG <subject> <sid> [reply]
    <hdr_len> <total_len>\\r\\n<headers><payload>\\r\\n`` where hdr_len =
    len(headers) and total_len = hdr_len + len(payload) (client.go
    deliverMsg). An empty or None ``headers`` gives a MSG, as nats-server
    does for header length 0. Strings are encoded utf-8 + surrogateescape.
    """
    subj = subject.encode(_ENC, _ESC)
    sid_b = sid.encode(_ENC, _ESC)
    if headers:
        hlen = len(headers)
        if reply:
            return b"HMSG %b %b %b %d %d\r\n%b%b\r\n" % (
                subj, sid_b, reply.encode(_ENC, _ESC), hlen, hlen + len(payload), headers, payload
            )
        return b"HMSG %b %b %d %d\r\n%b%b\r\n" % (subj, sid_b, hlen, hlen + len(payload), headers, payload)
    if reply:
        return b"MSG %b %b %b %d\r\n%b\r\n" % (subj, sid_b, reply.encode(_ENC, _ESC), len(payload), payload)
    return b"MSG %b %b %d\r\n%b\r\n" % (subj, sid_b, len(payload), payload)


def encode_err(text: str) -> bytes:
    """``-ERR '<text>'\\r\\n`` (client.go sendErr, const.go errProto); nats-py needs the quotes."""
    return b"-ERR '" + text.encode(_ENC, _ESC) + b"'\r\n"


def _check_header_text(what: str, value: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"{what} must not contain CR or LF: {value!r}")


def status_headers(code: int, description: str = "", extra: Mapping[str, str] | None = None) -> bytes:
    """A status header block: ``NATS/1.0 <code>[ <description>]\\r\\n[<Key>: <Value>\\r\\n]...\\r\\n``.

    E.g. ``status_headers(503)`` -> ``b"NATS/1.0 503\\r\\n\\r\\n"``;
    ``status_headers(408, "Request Timeout", {"Nats-Pending-Messages": "1"})``
    as nats-server's consumer.go writes them. Raises ValueError if ``code``
    is not in 100..999 or any text contains CR/LF (or a key contains ``:``).
    """
    if not 100 <= code <= 999:
        raise ValueError(f"status code must have three digits: {code}")
    _check_header_text("description", description)
    parts = [f"NATS/1.0 {code} {description}\r\n" if description else f"NATS/1.0 {code}\r\n"]
    if extra:
        for key, value in extra.items():
            _check_header_text("header name", key)
            _check_header_text("header value", value)
            if ":" in key or not key:
                raise ValueError(f"invalid header name: {key!r}")
            parts.append(f"{key}: {value}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode(_ENC, _ESC)


NO_RESPONDERS_HEADERS = status_headers(503)
"""``b"NATS/1.0 503\\r\\n\\r\\n"``: the subject-less 503 status block.

nats-server 2.15 adds the request subject (see :func:`no_responders_headers`);
nats-py recognises either form as no-responders.
"""


def no_responders_headers(subject: str) -> bytes:
    """Exactly the header block nats-server 2.15 sends for a request nobody answers.

    ``NATS/1.0 503\\r\\nNats-Subject: <subject>\\r\\n\\r\\n`` (32 + len(subject)
    bytes for an ASCII subject; client.go processInboundClientMsg). Deliver it
    with ``encode_msg(reply, sid, None, b"", headers)`` to the requester's
    subscription for the reply subject.
    """
    return b"NATS/1.0 503\r\nNats-Subject: " + subject.encode(_ENC, _ESC) + b"\r\n\r\n"
