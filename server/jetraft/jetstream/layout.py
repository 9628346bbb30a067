"""One account's JetStream files: the store directory layout, the stream and consumer meta
files, and recovery from them.

nats-server's layout (server/filestore.go, server/jetstream.go), JSON instead of its binary
meta files::

    <store_dir>/jetstream/<account>/streams/<stream>/meta.json         {"config", "created"}
    <store_dir>/jetstream/<account>/streams/<stream>/msgs/             FileStore blocks
    <store_dir>/jetstream/<account>/streams/<stream>/obs/<consumer>/meta.json   {"config", "created"}
    <store_dir>/jetstream/<account>/streams/<stream>/obs/<consumer>/state.json  Consumer.state_to_json()

``created`` is ns since the epoch. Every file is written whole and durably
(:func:`atomic_write`) through the :mod:`~jetraft.storage.fileio` seam, so that tests
can fail any step as a full or failing disk does.

A meta file that cannot be read is reported (``problem(stream, consumer, path, detail)``,
the account's ``jetstream_recovery_problem``) and its stream or consumer left on disk,
untouched, for the operator; it is never deleted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from jetraft.storage import fileio

from .consumer import Consumer
from .errors import JSApiError
from .model import API_LEVEL, UNSUPPORTED, ConsumerConfig, StreamConfig
from .requests import json_bytes, unmet_required_level
from .store import FileStore
from .stream import Stream, parse_message_ttl
from .ttl import TtlIndex

__all__ = ["RecoveredStream", "atomic_write", "consumer_dir", "consumer_state_path", "msgs_dir", "offline_reason",
           "read_ttl_index", "recover_consumers", "recover_streams", "save_ttl_index", "stream_dir", "streams_dir",
           "ttl_index_path", "write_consumer_meta", "write_state_files", "write_stream_meta"]

#: ``problem(stream, consumer or None, path, detail)``: report what recovery could not load.
Problem = Callable[[str, "str | None", str, str], None]

T = TypeVar("T")

META = "meta.json"
STATE = "state.json"
TTL_INDEX = "ttl.idx"


def streams_dir(store_dir: str, account: str) -> str:
    """``<store_dir>/jetstream/<account>/streams``: the account's stream directories."""
    return os.path.join(store_dir, "jetstream", account, "streams")


def stream_dir(base: str, stream: str) -> str:
    """A stream's directory under :func:`streams_dir` ``base``."""
    return os.path.join(base, stream)


def msgs_dir(sdir: str) -> str:
    """The FileStore directory of the stream in ``sdir``."""
    return os.path.join(sdir, "msgs")


def consumer_dir(sdir: str, consumer: str) -> str:
    """A consumer's directory in its stream's directory ``sdir``."""
    return os.path.join(sdir, "obs", consumer)


def consumer_state_path(sdir: str, consumer: str) -> str:
    """A consumer's state file (its delivered and acknowledged state)."""
    return os.path.join(consumer_dir(sdir, consumer), STATE)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably (:func:`jetraft.storage.fileio.atomic_write`:
    temp file, fdatasync, rename, fsync the directory). A crash leaves the old file or the
    new one. Raises OSError (FileNotFoundError when the directory is gone)."""
    fileio.atomic_write(path, data)


def write_state_files(writes: list[tuple[str, bytes]]) -> None:
    """Write consumer state files and TTL indexes (``(path, bytes)``, see
    :func:`consumer_state_path`, :func:`ttl_index_path`) durably; one whose directory is
    gone (deleted meanwhile) is skipped. Raises
    OSError."""
    for path, data in writes:
        if os.path.isdir(os.path.dirname(path)):
            try:
                atomic_write(path, data)
            except FileNotFoundError:
                continue


def ttl_index_path(sdir: str) -> str:
    """A stream's saved TTL index (jetstream/ttl.py), written with the consumers' state."""
    return os.path.join(sdir, TTL_INDEX)


def read_ttl_index(sdir: str) -> bytes | None:
    """The stream's saved TTL index, None when there is none or it cannot be read (the
    stream then reads its messages' TTLs again)."""
    try:
        with open(ttl_index_path(sdir), "rb") as f:
            return f.read()
    except OSError:
        return None


def save_ttl_index(sdir: str, store: Any) -> None:
    """Read every message of ``store`` for its ``Nats-TTL`` and save the TTL index in
    ``sdir`` (jetstream/ttl.py), so that the stream opened over ``store`` reads it back
    instead: call it in the worker thread that opened the store (it reads the whole store).
    Raises OSError."""
    index = TtlIndex()
    index.scan(store, parse_message_ttl)
    atomic_write(ttl_index_path(sdir), index.to_bytes())


def write_stream_meta(sdir: str, cfg: StreamConfig, created: int) -> None:
    """Write the stream's meta file (its config and creation time). Raises OSError."""
    atomic_write(os.path.join(sdir, META), json_bytes({"config": cfg.to_json(), "created": created}))


def write_consumer_meta(sdir: str, consumer: Consumer) -> None:
    """Create the consumer's directory and write its meta and state files. Raises OSError."""
    cdir = consumer_dir(sdir, consumer.name)
    fileio.make_dirs(cdir)
    atomic_write(os.path.join(cdir, META),
                 json_bytes({"config": consumer.config.to_json(), "created": consumer.created_ns}))
    atomic_write(os.path.join(cdir, STATE), json_bytes(consumer.state_to_json()))


def _read_json(path: str) -> Any:
    with open(path, "rb") as fh:
        return json.loads(fh.read())


#: What reading a meta file may raise: the file, its JSON, its shape, its config.
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, JSApiError)


def _required_level(path: str) -> str | None:
    """The ``_nats.req.level`` of a meta file's config when this server's API level is
    below it, else None (:func:`unmet_required_level`). Never raises."""
    try:
        return unmet_required_level(_read_json(path).get("config"))
    except (OSError, ValueError, AttributeError):
        return None


def offline_reason(level: str | None, exc: BaseException) -> str:
    """Why a stored stream or consumer is offline, as nats-server says it (jetstream.go
    addStreams): ``unsupported - config error: <decoding error>`` or ``unsupported -
    required API level: <n>, current API level: <this server's>`` when it needs a higher
    API level, ``unsupported - <setting> is not supported by jetraft`` for a setting
    jetraft does not act on, else ``decoding error: <error>``."""
    text = exc.description if isinstance(exc, JSApiError) else str(exc)
    if isinstance(exc, JSApiError) and exc.err_code == 10025:       # invalid JSON: json: ...
        text = text.removeprefix("invalid JSON: ")
    if level is not None:
        if isinstance(exc, ValueError) and str(exc) == level:
            return f"unsupported - required API level: {level}, current API level: {API_LEVEL}"
        return f"unsupported - config error: {text.removeprefix('json: ')}"
    if isinstance(exc, JSApiError) and text.endswith(UNSUPPORTED):
        return f"unsupported - {text}"
    return f"decoding error: {text}"


def _read_meta(path: str, decode: Callable[[Any], T], now_ns: int) -> tuple[T, int]:
    """A meta file's decoded config and creation time (``now_ns`` when absent); raises one of
    :data:`_UNREADABLE`."""
    meta = _read_json(path)
    return decode(meta["config"]), int(meta.get("created", now_ns))


@dataclass(slots=True)
class RecoveredStream:
    """A stream directory found by :func:`recover_streams`: its ``stream`` (None when not
    loaded, ``unloaded`` then saying why) and its directory."""

    name: str
    directory: str
    stream: Stream | None = None
    unloaded: str = ""


def recover_streams(base: str | None, now_ns: int, *, sync: Any, sync_always: bool, domain: str,
                    problem: Problem) -> Iterator[RecoveredStream]:
    """The streams under ``base`` (:func:`streams_dir`), by name, each opened on its
    FileStore (``sync``, ``sync_always``: the server's group commit and its policy).

    Problems are reported through ``problem`` as they are met, before the stream is
    yielded: an unreadable meta file; a stored config that needs a higher API level than
    this server's (``_nats.req.level``, written by a newer server) or has a setting jetraft
    does not act on (``StreamConfig.check_supported``): the stream is then yielded
    unloaded, offline with its reason (:func:`offline_reason`), its files untouched;
    corrupt or torn message records.
    """
    if base is None or not os.path.isdir(base):
        return
    for sname in sorted(os.listdir(base)):
        sdir = stream_dir(base, sname)
        meta_path = os.path.join(sdir, META)
        level = _required_level(meta_path)
        try:
            config, created = _read_meta(meta_path, StreamConfig.from_json, now_ns)
        except _UNREADABLE as exc:
            reason = offline_reason(level, exc)
            problem(sname, None, meta_path, f"stream not loaded: {reason}; its files are kept")
            yield RecoveredStream(sname, sdir, unloaded=reason)
            continue
        try:
            if level is not None:
                raise ValueError(level)
            config.check_supported()
        except (JSApiError, ValueError) as exc:
            reason = offline_reason(level, exc)
            problem(sname, None, meta_path, f"stream not loaded: {reason}; its files are kept")
            yield RecoveredStream(sname, sdir, unloaded=reason)
            continue
        store = FileStore(msgs_dir(sdir), sync=sync, sync_always=sync_always)
        for item in store.recovery_report:
            problem(sname, None, os.path.join(msgs_dir(sdir), item["file"]),
                    f"{item['kind']} at offset {item['offset']} (seq {item['first_seq']}): "
                    f"{item['detail']}")
        yield RecoveredStream(sname, sdir, Stream(config, store, created_ns=created, domain=domain,
                                                  now_ns=now_ns, ttl_state=read_ttl_index(sdir)))


def recover_consumers(found: RecoveredStream, now_ns: int, *, interest: Callable[[str], bool],
                      problem: Problem, unsupported: Callable[[str, str], None] | None = None
                      ) -> Iterator[Consumer]:
    """The consumers of a loaded stream :func:`recover_streams` found, by name, with their
    stored state (``interest``: ``interest(subject) -> bool`` for push consumers).

    Reported through ``problem`` and skipped, files untouched: an unreadable meta file, a
    stored config that needs a higher API level than this server's or has a setting
    jetraft does not act on; those two are also told to ``unsupported(consumer, reason)``
    (the caller takes the stream offline, as nats-server does: a stream must not remove
    what a consumer it cannot load still needs). An unreadable or rejected state file is
    reported and the consumer delivers from its start.
    """
    sname, sdir, stream = found.name, found.directory, found.stream
    assert stream is not None
    obs = os.path.join(sdir, "obs")
    if not os.path.isdir(obs):
        return
    for cname in sorted(os.listdir(obs)):
        cdir = consumer_dir(sdir, cname)
        meta_path = os.path.join(cdir, META)
        level = _required_level(meta_path)
        try:
            ccfg, ccreated = _read_meta(meta_path, lambda c: ConsumerConfig.decode(c).checked(stream.config),
                                        now_ns)
        except _UNREADABLE as exc:
            if level is not None and unsupported is not None:
                reason = offline_reason(level, exc)
                problem(sname, cname, meta_path, f"consumer not loaded: {reason}; its files are kept")
                unsupported(cname, reason)
            else:
                problem(sname, cname, meta_path, f"consumer meta unreadable: {exc}")
            continue
        what = ccfg.unsupported()
        if what is not None or level is not None:
            reason = offline_reason(level, ValueError(level)) if level is not None \
                else f"unsupported - {what} {UNSUPPORTED}"
            problem(sname, cname, meta_path, f"consumer not loaded: {reason}; its files are kept")
            if unsupported is not None:
                unsupported(cname, reason)
            continue
        state = None
        state_path = os.path.join(cdir, STATE)
        if os.path.exists(state_path):
            try:
                state = _read_json(state_path)
            except (OSError, ValueError) as exc:
                problem(sname, cname, state_path, f"consumer state unreadable, delivering from its start: {exc}")
        try:
            consumer = Consumer(stream, cname, ccfg, created_ns=ccreated, state=state, has_interest=interest)
        except Exception as exc:  # noqa: BLE001 - a bad state file must not stop the server
            problem(sname, cname, state_path, f"consumer state rejected: {exc}")
            consumer = Consumer(stream, cname, ccfg, created_ns=ccreated, has_interest=interest)
        yield consumer
