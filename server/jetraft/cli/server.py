"""``jetraft-server``: run a server with nats-server's command-line flags.

Flags mirror nats-server's (``nats-server --help``); a flag overrides the same option in
the configuration file. ``-t`` checks a configuration and exits: 0 and
``configuration file <path> is valid`` on stderr, or 1 and the error with its file, line
and column. ``--signal ldm|stop|quit|term|reload|reopen[=<pid or pid file>]`` signals a
running server (nats-server server/signal.go mapping).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click
import trio

from jetraft import NATS_FEATURE_VERSION, __version__
from jetraft.config import (
    AuthorizationConfig,
    ClusterConfig,
    ConfigError,
    JetStreamConfig,
    ServerConfig,
    TLSConfig,
    config_from_text,
    server_context,
    load_config,
    parse_route_url,
    validate,
)
from jetraft.config.errors import COMMAND_LINE

PROG = "jetraft-server"

#: ``--signal`` names (nats-server server/signal.go).
SIGNALS = {
    "ldm": signal.SIGUSR2,
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reload": signal.SIGHUP,
    "reopen": signal.SIGUSR1,
}


class UsageFailure(Exception):
    """A command-line problem; printed as ``jetraft-server: <message>`` with exit 1."""


def _split_host_port(url: str, default_port: int) -> tuple[str, int]:
    """``nats://0.0.0.0:6222`` / ``0.0.0.0:6222`` / ``:6222`` -> (host, port)."""
    rest = url.split("://", 1)[-1].rsplit("@", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host and not port.isdigit():
        return rest or "0.0.0.0", default_port
    try:
        return host or "0.0.0.0", int(port)
    except ValueError as exc:
        raise UsageFailure(f"invalid cluster URL {url!r}: port is not a number") from exc


def build_overrides(opts: dict) -> Callable[[ServerConfig], ServerConfig]:
    """A function applying the command-line options in ``opts`` to a loaded configuration.

    Kept as a function so that a SIGHUP reload can re-apply the same flags to the re-read
    file. Raises :class:`UsageFailure` for malformed flag values.
    """

    def apply(cfg: ServerConfig) -> ServerConfig:
        changes: dict = {}
        if opts.get("port") is not None:
            changes["port"] = opts["port"]
        if opts.get("addr"):
            changes["host"] = opts["addr"]
            # Monitoring binds the client host unless the file's http/https gave one
            # (nats-server server/opts.go setBaselineOptions: HTTPHost defaults to Host,
            # after the flags have overridden Host).
            if "http_host" not in cfg.origins:
                changes["http_host"] = opts["addr"]
        if opts.get("http_port") is not None:
            changes["http_port"] = opts["http_port"]
        if opts.get("https_port") is not None:
            changes["https_port"] = opts["https_port"] or None
        tls = tls_override(opts, cfg.tls)
        if tls is not False:
            changes["tls"] = tls
        if opts.get("server_name"):
            changes["server_name"] = opts["server_name"]
        if opts.get("pid_file"):
            changes["pid_file"] = opts["pid_file"]
        logging_changes = {}
        if opts.get("debug"):
            logging_changes["debug"] = True
        if opts.get("trace"):
            logging_changes["trace"] = True
        if opts.get("log_file"):
            logging_changes["log_file"] = opts["log_file"]
        if opts.get("logtime") is not None:
            logging_changes["logtime"] = _go_bool("logtime", opts["logtime"])
        if opts.get("logtime_utc"):
            logging_changes["logtime_utc"] = True
        if opts.get("log_size_limit"):
            logging_changes["log_size_limit"] = opts["log_size_limit"]
        if logging_changes:
            changes["logging"] = dataclasses.replace(cfg.logging, **logging_changes)
        if opts.get("jetstream") or opts.get("store_dir"):
            js = cfg.jetstream or JetStreamConfig()
            if opts.get("store_dir"):
                js = dataclasses.replace(js, store_dir=opts["store_dir"])
            changes["jetstream"] = js
        if opts.get("user") or opts.get("password") or opts.get("auth_token"):
            authz = cfg.authorization or AuthorizationConfig()
            changes["authorization"] = dataclasses.replace(
                authz,
                user=opts.get("user") or authz.user,
                password=opts.get("password") or authz.password,
                token=opts.get("auth_token") or authz.token,
            )
        cluster_listen = opts.get("cluster_listen") or opts.get("cluster")
        if cluster_listen or opts.get("routes") or opts.get("cluster_name"):
            cl = cfg.cluster or ClusterConfig()
            if cluster_listen:
                host, port = _split_host_port(cluster_listen, 6222)
                cl = dataclasses.replace(cl, host=host, port=port)
            if opts.get("routes"):
                try:
                    routes = tuple(parse_route_url(r.strip()) for r in opts["routes"].split(",") if r.strip())
                except ConfigError as exc:
                    raise UsageFailure(f"--routes: {exc.message}") from exc
                cl = dataclasses.replace(cl, routes=routes)
            if opts.get("cluster_name"):
                cl = dataclasses.replace(cl, name=opts["cluster_name"])
            changes["cluster"] = cl
        return dataclasses.replace(cfg, **changes) if changes else cfg

    return apply


_GO_BOOLS = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
             **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


def _go_bool(name: str, text: str) -> bool:
    """A boolean flag's value as Go's flag package reads it (strconv.ParseBool)."""
    value = _GO_BOOLS.get(text)
    if value is None:
        raise UsageFailure(f"invalid boolean value {text!r} for -{name}")
    return value


def tls_override(opts: dict, current: TLSConfig | None) -> TLSConfig | None | bool:
    """The client TLS the ``--tls*`` flags ask for (nats-server opts.go ConfigureOptions and
    overrideTLS): ``--tls=false`` turns TLS off; any of ``--tls``, ``--tlscert``,
    ``--tlskey``, ``--tlscacert``, ``--tlsverify`` builds a new block from the flags alone
    (certificate and key required), keeping the file's ``timeout``, ``handshake_first`` and
    ``verify_and_map`` as nats-server keeps TLSTimeout, TLSHandshakeFirst and TLSMap. Returns
    False when no TLS flag was given. Raises UsageFailure; the files are checked by the
    configuration's loader (ConfigError)."""
    enabled = opts.get("tls")
    verify = opts.get("tlsverify")
    given = [enabled, verify, opts.get("tlscert"), opts.get("tlskey"), opts.get("tlscacert")]
    if all(v is None for v in given):
        return False
    if enabled is not None and not _go_bool("tls", enabled):
        return None
    if not opts.get("tlscert"):
        raise UsageFailure("TLS Server certificate must be present and valid")
    if not opts.get("tlskey"):
        raise UsageFailure("TLS Server private key must be present and valid")
    kept = {}
    if current is not None:
        kept = {"timeout": current.timeout, "handshake_first": current.handshake_first,
                "handshake_first_fallback": current.handshake_first_fallback,
                "verify_and_map": current.verify_and_map}
    verify_on = verify is not None and _go_bool("tlsverify", verify)
    tls = TLSConfig(cert_file=opts["tlscert"], key_file=opts["tlskey"], ca_file=opts.get("tlscacert") or None,
                    **kept)
    return dataclasses.replace(tls, verify=verify_on or tls.verify_and_map)


def load(config_path: str | None, opts: dict) -> tuple[ServerConfig, Callable[[ServerConfig], ServerConfig]]:
    """Load the file (or the defaults), apply the flags, validate. Raises ConfigError/UsageFailure."""
    overrides = build_overrides(opts)
    base = load_config(config_path) if config_path else config_from_text("", filename="<command line>")
    cfg = overrides(base)
    validate(cfg)
    if cfg.tls is not None and cfg.tls is not base.tls:  # from the flags: load its files now
        server_context(cfg.tls, COMMAND_LINE)
    return cfg, overrides


def send_signal(spec: str, pid_file: str | None) -> None:
    """``--signal name[=pid|pidfile]``: signal a running server. Raises UsageFailure."""
    name, _, target = spec.partition("=")
    sig = SIGNALS.get(name.strip().lower())
    if sig is None:
        raise UsageFailure(f"unknown signal {name!r} (expected one of {', '.join(SIGNALS)})")
    target = target.strip() or (pid_file or "")
    if not target:
        raise UsageFailure("no PID given: use --signal {0}=<pid> or --signal {0}=<pid file>, "
                           "or -P/pid_file".format(name))
    if target.isdigit():
        pid = int(target)
    else:
        try:
            pid = int(Path(target).read_text().strip())
        except (OSError, ValueError) as exc:
            raise UsageFailure(f"cannot read a PID from {target}: {exc}") from exc
    try:
        os.kill(pid, sig)
    except ProcessLookupError as exc:
        raise UsageFailure(f"no process with PID {pid}") from exc
    except PermissionError as exc:
        raise UsageFailure(f"not permitted to signal PID {pid}") from exc


def run_server(cfg: ServerConfig, overrides: Callable[[ServerConfig], ServerConfig],
               events_file: str | None = None) -> int:
    """Run until stopped by a signal; returns the exit status. The JSON event log goes to
    stdout and, with ``--events FILE``, to FILE; ``-l``/``log_file`` is the human log."""
    # Imported here so that -t, -v and --signal do not load trio, hypercorn and the server.
    from jetraft.server import Server, configure_human_log, log_threshold, write_pid_file

    server = Server(cfg, overrides=overrides, handle_signals=True)
    events = server.events
    events.threshold = log_threshold(cfg)
    try:
        if events_file:
            events.open_file(events_file)
        configure_human_log(events, cfg)
    except OSError as exc:
        raise UsageFailure(f"cannot open the log: {exc}") from exc
    if cfg.pid_file:
        write_pid_file(cfg.pid_file)
    # Everything loaded so far lives as long as the process: keep it out of the cyclic
    # collector's scans (gc.freeze), and collect the youngest generation every 20,000
    # allocations instead of 700: the hot paths allocate many short-lived objects that
    # reference counting frees anyway (a few percent of sync-publish latency).
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
    try:
        trio.run(server.serve)
    except OSError as exc:
        raise UsageFailure(f"cannot start: {exc}") from exc
    finally:
        if server.config.pid_file:      # a reload may have named another one
            Path(server.config.pid_file).unlink(missing_ok=True)
        events.close()
    return 0


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_path", metavar="FILE", help="Configuration file.")
@click.option("-t", "test_config", is_flag=True, help="Test the configuration and exit.")
@click.option("-p", "--port", type=int, help="Port for clients (default 4222; -1 for a random port).")
@click.option("-a", "--addr", "--net", "addr", metavar="HOST", help="Bind to host address (default 0.0.0.0).")
@click.option("-m", "--http_port", type=int, help="Port for HTTP monitoring.")
@click.option("-ms", "--https_port", type=int, help="Port for HTTPS monitoring (needs TLS).")
@click.option("-n", "--name", "--server_name", "server_name", help="Server name (default: the server id).")
@click.option("-P", "--pid", "pid_file", metavar="FILE", help="File to store the PID.")
@click.option("-l", "--log", "log_file", metavar="FILE",
              help="File to store logging output (nats-server's format; the JSON event log stays on stdout).")
@click.option("-T", "--logtime", "logtime", is_flag=False, flag_value="true", default=None, metavar="[=BOOL]",
              help="Timestamp log entries (default: true).")
@click.option("--logtime_utc", is_flag=True, help="Timestamps in UTC instead of local timezone.")
@click.option("--log_size_limit", type=int, metavar="BYTES", help="Logfile size limit being auto-rotated.")
@click.option("-s", "--syslog", "syslog", is_flag=False, flag_value="true", default=None, metavar="[=BOOL]",
              help="Refused unless false: jetraft writes no syslog.")
@click.option("-r", "--remote_syslog", metavar="URL", help="Refused: jetraft writes no syslog.")
@click.option("--events", "events_file", metavar="FILE", help="Also write the JSON event log to FILE.")
@click.option("-D", "--debug", is_flag=True, help="Enable Debug logging.")
@click.option("-V", "--trace", is_flag=True, help="Enable Trace logging.")
@click.option("-DV", "debug_trace", is_flag=True, help="Enable Debug and Trace logging.")
@click.option("-js", "--jetstream", is_flag=True, help="Enable JetStream.")
@click.option("-sd", "--store_dir", metavar="DIR", help="JetStream storage directory.")
@click.option("--user", help="User required for connections.")
@click.option("--pass", "password", help="Password required for connections.")
@click.option("--auth", "auth_token", help="Token required for connections.")
@click.option("-tls", "--tls", "tls", is_flag=False, flag_value="true", default=None, metavar="[=BOOL]",
              help="Enable TLS (-tls=false turns off the file's tls block).")
@click.option("-tlsverify", "--tlsverify", "tlsverify", is_flag=False, flag_value="true", default=None,
              metavar="[=BOOL]", help="Enable TLS with client verification.")
@click.option("-tlscert", "--tlscert", "tlscert", metavar="FILE", help="Server certificate file.")
@click.option("-tlskey", "--tlskey", "tlskey", metavar="FILE", help="Private key for server certificate.")
@click.option("-tlscacert", "--tlscacert", "tlscacert", metavar="FILE", help="Client certificate CA for verification.")
@click.option("--routes", metavar="URL[,URL]", help="Routes to solicit and connect.")
@click.option("--cluster", metavar="URL", help="Cluster URL for solicited routes.")
@click.option("--cluster_listen", metavar="URL", help="Cluster URL from which members can solicit routes.")
@click.option("--cluster_name", help="Cluster name.")
@click.option("-sl", "--signal", "signal_spec", metavar="SIGNAL[=PID]",
              help="Send a signal to a running server: ldm, stop, quit, term, reopen, reload.")
@click.option("-v", "--version", "show_version", is_flag=True, help="Show the version.")
def cli(config_path: str | None, test_config: bool, signal_spec: str | None, show_version: bool,
        debug_trace: bool, syslog: str | None, remote_syslog: str | None, events_file: str | None,
        **opts: object) -> None:
    """Run a jetraft server (NATS-compatible; flags as nats-server)."""
    if show_version:
        click.echo(f"{PROG}: v{__version__} (NATS protocol {NATS_FEATURE_VERSION})")
        return
    if debug_trace:
        opts["debug"] = opts["trace"] = True
    try:
        if (syslog is not None and _go_bool("syslog", syslog)) or remote_syslog:
            raise UsageFailure(f"{'--remote_syslog' if remote_syslog else '--syslog'} is not supported: "
                               "jetraft writes no syslog (use -l FILE, or the journal of its service)")
        if signal_spec:
            pid_file = opts.get("pid_file")
            if not pid_file and config_path:
                pid_file = load_config(config_path).pid_file
            send_signal(signal_spec, pid_file)
            return
        cfg, overrides = load(config_path, opts)
        if test_config:
            for warning in cfg.warnings:
                click.echo(f"{PROG}: warning: {warning}", err=True)
            click.echo(f"{PROG}: configuration file {config_path or '<defaults>'} is valid", err=True)
            return
        sys.exit(run_server(cfg, overrides, events_file))
    except (ConfigError, UsageFailure) as exc:
        click.echo(f"{PROG}: {exc}", err=True)
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name=PROG)


if __name__ == "__main__":
    main()
