"""NATS message header blocks (HPUB/HMSG), sans-IO.

A block is ``NATS/1.0[ <status>[ <description>]]\\r\\n`` then ``Key: Value\\r\\n`` lines
then an empty line (``\\r\\n``). A space after ``NATS/1.0`` means a status follows: three
digits, optionally a space and a free-text description (e.g. ``NATS/1.0 503``,
``NATS/1.0 408 Request Timeout``). Keys may repeat; their order is kept.

Two readers, for two purposes:

- :func:`parse` reads a whole block strictly into :class:`Headers` and raises only
  :class:`HeaderError` (never ``UnicodeDecodeError``, ``IndexError``...) on a malformed
  block. Bytes that are not UTF-8 survive a round trip (``surrogateescape``).
- :func:`get_header` is the lenient lookup nats-server applies to published messages
  (``server/client.go getHeader/sliceHeader``): first line starting exactly with
  ``Key:`` (case-sensitive), leading spaces of the value skipped, up to CRLF; never
  raises; ``None`` if absent. The JetStream publish path uses this one so that a
  malformed block gets nats-server's answer, not an error of ours.

:func:`encode` writes a block back; ``parse(encode(h)) == h`` for any valid ``h``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HeaderError", "Headers", "NATS_HDR_LINE", "append_lines", "encode", "get_header", "parse",
           "set_header"]

NATS_HDR_LINE = b"NATS/1.0"
_CRLF = b"\r\n"


class HeaderError(ValueError):
    """The header block is malformed; the message says where and why."""


@dataclass
class Headers:
    """A parsed header block.

    ``status``: the three-digit status text ("" when none), ``description`` its text ("" when
    none), ``fields``: key -> list of values in arrival order (keys case-sensitive, as sent).
    """

    status: str = ""
    description: str = ""
    fields: dict[str, list[str]] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        """The first value of ``key`` (exact case), or ``default``."""
        values = self.fields.get(key)
        return values[0] if values else default

    def get_all(self, key: str) -> list[str]:
        """Every value of ``key`` (exact case), possibly empty."""
        return list(self.fields.get(key, ()))

    def add(self, key: str, value: str) -> None:
        """Append one value of ``key``."""
        self.fields.setdefault(key, []).append(value)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def parse(block: bytes) -> Headers:
    """Parse a full header block (``bytes``) into :class:`Headers`.

    Raises :class:`HeaderError` when the block does not start with ``NATS/1.0``, the version
    line has anything but `` <3 digits>[ <description>]`` after it, the block does not end
    with an empty line (``\\r\\n\\r\\n``), a line has no ``:``, a key is empty or holds
    whitespace, or a bare ``\\r``/``\\n`` appears inside a line.
    """
    if not isinstance(block, (bytes, bytearray, memoryview)):
        raise HeaderError(f"header block must be bytes, not {type(block).__name__}")
    block = bytes(block)
    if not block.startswith(NATS_HDR_LINE):
        raise HeaderError("header block does not start with NATS/1.0")
    if not block.endswith(b"\r\n\r\n"):
        raise HeaderError("header block does not end with an empty line (CRLF CRLF)")
    lines = block[:-4].split(_CRLF)
    for i, line in enumerate(lines):
        if b"\r" in line or b"\n" in line:
            raise HeaderError(f"line {i + 1}: stray CR or LF")
    h = Headers()
    rest = lines[0][len(NATS_HDR_LINE):]
    if rest:
        if rest[:1] != b" ":
            raise HeaderError("version line: expected a space then a status after NATS/1.0")
        status, _, desc = rest.lstrip(b" ").partition(b" ")
        if len(status) != 3 or not status.isdigit():
            raise HeaderError(f"version line: status {_text(status)!r} is not three digits")
        h.status, h.description = status.decode("ascii"), _text(desc.strip(b" "))
    for i, line in enumerate(lines[1:], start=2):
        key, sep, value = line.partition(b":")
        if not sep:
            raise HeaderError(f"line {i}: no ':' in header line")
        if not key or any(c in key for c in b" \t"):
            raise HeaderError(f"line {i}: empty key or whitespace in key")
        h.add(_text(key), _text(value.strip(b" \t")))
    return h


def encode(headers: Headers) -> bytes:
    """The block for ``headers``: version line (with status/description when set), one
    ``Key: Value`` line per value, empty line. Raises :class:`HeaderError` for a key or
    value that cannot be written (CR/LF anywhere, ``:``/whitespace in a key, a status that
    is not three digits)."""
    first = NATS_HDR_LINE
    if headers.status:
        if len(headers.status) != 3 or not headers.status.isdigit():
            raise HeaderError(f"status {headers.status!r} is not three digits")
        first += b" " + headers.status.encode("ascii")
        if headers.description:
            first += b" " + _bytes(headers.description)
    elif headers.description:
        raise HeaderError("a description needs a status")
    out = [first]
    for key, values in headers.fields.items():
        k = _bytes(key)
        if not k or any(c in k for c in b" \t:"):
            raise HeaderError(f"key {key!r}: empty, or holds ':' or whitespace")
        for value in values:
            out.append(k + b": " + _bytes(value))
    return _CRLF.join(out) + b"\r\n\r\n"


def _bytes(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogateescape")
    if b"\r" in raw or b"\n" in raw:
        raise HeaderError(f"{text!r}: CR or LF in a header")
    return raw


def get_header(block: bytes | None, key: str) -> str | None:
    """Value of the first ``key`` header in ``block`` the way nats-server finds it
    (``server/client.go sliceHeader``): the key must start a line (follow CRLF) and be
    followed by ``:``; spaces after the colon are skipped; the value runs to the next CRLF
    (or the end). ``None`` when absent or ``block`` is empty. Never raises. Like
    nats-server, a match found within the first two bytes of the search ends it (so a
    one-letter key that occurs in ``NATS/1.0`` is never found)."""
    if not block:
        return None
    bkey = key.encode("utf-8", "surrogateescape")
    offset = 0
    while True:
        i = block.find(bkey, offset)
        if i < 2:
            return None
        if block[i - 2:i] != _CRLF or i + len(bkey) >= len(block) or \
                block[i + len(bkey)] != 0x3A:
            if i + len(bkey) >= len(block):
                return None
            offset = i + len(bkey)
            continue
        j = i + len(bkey) + 1
        while j < len(block) and block[j] == 0x20:
            j += 1
        end = block.find(_CRLF, j)
        return _text(block[j:] if end < 0 else block[j:end])


def _key_index(block: bytes, bkey: bytes) -> int:
    """Where the first ``Key:`` line of ``block`` starts (nats-server getHeaderKeyIndex), -1."""
    offset = 0
    while True:
        i = block.find(bkey, offset)
        if i < 2:
            return -1
        if block[i - 2:i] == _CRLF and i + len(bkey) < len(block) and block[i + len(bkey)] == 0x3A:
            return i
        offset = i + len(bkey)


def set_header(block: bytes | None, key: str, value: str) -> bytes:
    """``block`` with the value of its first ``key`` header replaced by ``value`` (one space
    after the colon kept), or with ``key: value`` added at its end when it has none (a new
    ``NATS/1.0`` block when ``block`` is empty), as nats-server ``server/client.go
    setHeader``. A line with no CR after it is left as it is. Never raises."""
    bkey = key.encode("utf-8", "surrogateescape")
    bval = value.encode("utf-8", "surrogateescape")
    if not block:
        return NATS_HDR_LINE + _CRLF + bkey + b": " + bval + _CRLF + _CRLF
    start = _key_index(block, bkey)
    if start >= 0:
        vstart = start + len(bkey) + 1
        if vstart < len(block) and block[vstart] == 0x20:
            vstart += 1
        vend = block.find(b"\r", vstart)
        if vend < 0:
            return block
        return block[:vstart] + bval + block[vend:]
    if block.endswith(_CRLF):
        return block[:-2] + bkey + b": " + bval + _CRLF + _CRLF
    return block + bkey + b": " + bval + _CRLF


def append_lines(block: bytes | None, lines: str) -> bytes:
    """A header block with ``lines`` (``"Key: value\\r\\n"`` each) after the lines of
    ``block`` (None or empty: a new ``NATS/1.0`` block), keeping every line of ``block``
    as it is, as nats-server adds its headers to a stored message it sends again (a
    republish, a DIRECT.GET reply: server/stream.go genHeader)."""
    if block:
        base = block[:-2] if block.endswith(b"\r\n\r\n") else block
        return base + lines.encode() + b"\r\n"
    return NATS_HDR_LINE + b"\r\n" + lines.encode() + b"\r\n"
