"""``jetraft account info``: the connection, then the account's JetStream usage and limits.

The connection part is what the client learnt connecting (the server's INFO, a round
trip), plus the user, account, expiry and permissions when the server answers
``$SYS.REQ.USER.INFO`` (natscli cli/account_command.go infoAction); the
JetStream part is ``$JS.API.INFO`` (with ``--json``, that answer as the server gave it).
The layout is the ``nats`` CLI's. An account without JetStream is said so in the page,
as the ``nats`` CLI does; that is information, not a failure.
"""

from __future__ import annotations

import json
from typing import Any

import click
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from jetraft.cli.admin.groups import AliasedGroup, json_option, pass_options
from jetraft.cli.admin.session import CliError, Options, Session, describe_api_error, run
from jetraft.cli.admin.units import format_bytes, format_count, format_duration

USER_INFO = "$SYS.REQ.USER.INFO"
#: nats-server's JSNotEnabledForAccountErr.
JS_NOT_ENABLED_FOR_ACCOUNT = 10039


@click.group(cls=AliasedGroup)
def account() -> None:
    """Account information and status."""


def _rows(width: int, rows: list[tuple[str, Any]]) -> list[str]:
    return [f"{label:>{width}}: {value}" for label, value in rows]


def _tls_state(nc: Client) -> list[tuple[str, Any]]:
    """The TLS rows: version and cipher, server name, verified; or ``TLS Connection: no``."""
    transport = getattr(nc, "_transport", None)
    writer = getattr(transport, "_io_writer", None)
    ssl_object = writer.get_extra_info("ssl_object") if writer is not None else None
    if ssl_object is None:
        return [("TLS Connection", "no")]
    cipher = ssl_object.cipher()
    rows: list[tuple[str, Any]] = [
        ("TLS Version", f"{ssl_object.version()} using {cipher[0] if cipher else '?'}"),
        ("TLS Server", ssl_object.server_hostname or ""),
    ]
    cert = ssl_object.getpeercert() if ssl_object.context.verify_mode else None
    issuer = ", ".join("=".join(part) for rdn in (cert or {}).get("issuer", ()) for part in rdn)
    rows.append(("TLS Verified", f"issuer {issuer}" if cert else "no"))
    return rows


async def _user_info(session: Session) -> dict | None:
    """The server's ``$SYS.REQ.USER.INFO`` answer (user, account, expiry), or None when it
    does not answer."""
    try:
        msg = await session.nc.request(USER_INFO, b"", timeout=min(session.opts.timeout, 1.0))
        data = json.loads(msg.data)
    except (nats.errors.Error, ValueError):
        return None
    if not isinstance(data, dict) or data.get("error") or not isinstance(data.get("data"), dict):
        return None
    return data["data"]


async def connection_lines(session: Session) -> list[str]:
    """``Connection Information:`` and its rows."""
    nc = session.nc
    info: dict[str, Any] = getattr(nc, "_server_info", {}) or {}
    rows: list[tuple[str, Any]] = []
    user = await _user_info(session)
    if user is not None:
        name, account_name = user.get("user_name"), user.get("account_name")
        rows.append(("User", f"{name} ({user.get('user', '')})" if name else user.get("user", "")))
        rows.append(("Account", f"{account_name} ({user.get('account', '')})" if account_name
                     else user.get("account", "")))
        expires = user.get("expires") or 0
        rows.append(("Expires", format_duration(expires / 1e9) if expires else "never"))
    rtt = await nc.rtt()
    url = nc.connected_url
    rows += [("Client ID", nc.client_id), ("Client IP", info.get("client_ip", "")),
             ("RTT", format_duration(rtt)), ("Headers Supported", str(bool(info.get("headers"))).lower()),
             ("Maximum Payload", format_bytes(nc.max_payload))]
    if info.get("cluster"):
        rows.append(("Connected Cluster", info["cluster"]))
    rows += [("Connected URL", url.geturl() if url else ""),
             ("Connected Address", f"{url.hostname}:{url.port}" if url else ""),
             ("Connected Server ID", info.get("server_id", "")),
             ("Connected Server Version", info.get("version", ""))]
    if info.get("server_name") and info.get("server_name") != info.get("server_id"):
        rows.append(("Connected Server Name", info["server_name"]))
    rows += _tls_state(nc)
    lines = ["Connection Information:", "", *_rows(26, rows), ""]
    if user is not None and isinstance(user.get("permissions"), dict):
        lines += permission_lines(user["permissions"])
    return lines


def permission_lines(permissions: dict[str, Any]) -> list[str]:
    """``Connection Permissions:``: the user's publish and subscribe allow and deny lists
    (sorted), as the ``nats`` CLI shows the permissions of a $SYS.REQ.USER.INFO answer."""
    lines = ["Connection Permissions:", ""]
    for title, key in (("Publish", "publish"), ("Subscribe", "subscribe")):
        part = permissions.get(key) or {}
        if not part.get("allow") and not part.get("deny"):
            continue
        lines.append(f"   {title}:")
        for label in ("allow", "deny"):
            for i, subject in enumerate(sorted(part.get(label) or [])):
                lines.append(f"{label.title() if i == 0 else '':>26}{': ' if i == 0 else '  '}{subject}")
        lines.append("")
    return lines


def _of(used: str, limit: int | None, render=format_bytes) -> str:
    return f"{used} of {'Unlimited' if limit is None or limit < 0 else render(limit)}"


def tier_lines(name: str, tier: dict[str, Any]) -> list[str]:
    """One tier of the account's limits (``Default`` when the account has no tiers)."""
    limits = tier.get("limits") or {}
    ack_pending = limits.get("max_ack_pending") or 0
    mem_stream, store_stream = limits.get("memory_max_stream_bytes") or 0, limits.get("storage_max_stream_bytes") or 0
    return [
        f"   Tier: {name}", "",
        "      Configuration Requirements:", "",
        *_rows(38, [("Stream Requires Max Bytes Set", str(bool(limits.get("max_bytes_required"))).lower()),
                    ("Consumer Maximum Ack Pending",
                     format_count(ack_pending) if ack_pending > 0 else "Unlimited")]),
        "",
        "      Stream Resource Usage Limits:", "",
        *_rows(26, [("Memory", _of(format_bytes(tier.get("memory")), limits.get("max_memory"))),
                    ("Memory Per Stream", format_bytes(mem_stream) if mem_stream > 0 else "Unlimited"),
                    ("Storage", _of(format_bytes(tier.get("storage")), limits.get("max_storage"))),
                    ("Storage Per Stream", format_bytes(store_stream) if store_stream > 0 else "Unlimited"),
                    ("Streams", _of(format_count(tier.get("streams")), limits.get("max_streams"), format_count)),
                    ("Consumers", _of(format_count(tier.get("consumers")), limits.get("max_consumers"),
                                      format_count))]),
        "",
    ]


def jetstream_lines(resp: dict[str, Any], max_payload: int) -> list[str]:
    """``JetStream Account Information:``: usage, then limits of every tier."""
    domain = resp.get("domain") or ""
    lines = [f"JetStream Account Information for domain {domain}:" if domain
             else "JetStream Account Information:", "", "Account Usage:", ""]
    usage = [("Domain", domain)] if domain else []
    usage += [("Storage", format_bytes(resp.get("storage"))), ("Memory", format_bytes(resp.get("memory"))),
              ("Streams", format_count(resp.get("streams"))), ("Consumers", format_count(resp.get("consumers")))]
    lines += [*_rows(11, usage), "", "Account Limits:", "",
              f"   Max Message Payload: {format_bytes(max_payload)}", ""]
    tiers = resp.get("tiers") or {}
    for name in sorted(tiers) if tiers else ["Default"]:
        lines += tier_lines(name, tiers[name] if tiers else resp)
    return lines


@account.command("info")
@json_option
@pass_options
def account_info(opts: Options) -> None:
    """Account information: the connection (user, account and permissions from
    $SYS.REQ.USER.INFO when the server answers it), JetStream usage and limits
    ($JS.API.INFO). JetStream that does not answer, or answers with an error, is said so in
    the page, as the nats CLI does."""

    async def body(session: Session) -> None:
        subject = session.api_subject("INFO")
        if session.opts.json:
            session.output_json(await session.request_json(subject))
            return
        lines = await connection_lines(session)
        try:
            resp = await session.request_json(subject)
        except CliError as exc:
            if str(exc).startswith("no responders"):
                lines += ["   JetStream is not supported in this account", ""]
            elif str(exc).startswith("no reply"):  # e.g. a user not allowed to publish $JS.API.INFO
                lines += ["   No response from JetStream server", ""]
            else:
                raise
        except nats.js.errors.APIError as exc:
            if exc.err_code == JS_NOT_ENABLED_FOR_ACCOUNT:
                lines += ["   JetStream is not supported in this account", ""]
            else:
                lines += [f"   Could not obtain account information: {describe_api_error(exc)}", ""]
        else:
            lines += jetstream_lines(resp, session.nc.max_payload)
        session.echo("\n".join(lines).rstrip("\n"))

    run(opts, body)
