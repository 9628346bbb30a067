"""``jetraft``: the admin CLI, mirroring the ``nats`` CLI's commands.

It speaks only through nats-py, so it manages jetraft and nats-server alike::

    jetraft stream add ORDERS --subjects 'orders.>' --replicas 3
    jetraft stream info ORDERS
    jetraft stream cluster step-down ORDERS
    jetraft kv add CONFIG --history 5 && jetraft kv put CONFIG mode fast && jetraft kv watch CONFIG
    jetraft object add FILES && jetraft object put FILES ./backup.tar --name backup.tar
    jetraft server report jetstream --user sys --password sys
    jetraft context add lab --server nats://10.0.0.1:4222 --user app --password s3cret --select

Global options (``--server/-s``, ``--user``, ``--password``, ``--creds``, ``--context``,
``--context-file``, ``--timeout``, ``--json``, and TLS: ``--tlscert``, ``--tlskey``,
``--tlsca``, ``--tlsfirst``) may be given before or after the command, as with the
``nats`` CLI. Where the connection settings come from, most specific first:
the flags, the context (``--context NAME`` reads ``~/.config/nats/context/NAME.json``,
``--context-file PATH`` any such file; else ``NATS_CONTEXT`` or the context selected with
``jetraft context select`` or ``nats context select``: the same files), ``NATS_URL``, then
``nats://127.0.0.1:4222``.

A JetStream API error prints ``nats: error: <description> (err_code N)`` on stderr and
exits 1; so does a usage error (``nats: error: <what>, try --help``); so does a server that cannot be reached (naming the URLs and why). Ctrl-C exits
130, except for ``sub``, where it is the normal end.
"""

from __future__ import annotations

import click

from jetraft import __version__
from jetraft.cli.admin.groups import RootGroup, GLOBAL_FLAGS, GLOBAL_VALUED, hoist_global_options
from jetraft.cli.admin.accounts import account
from jetraft.cli.admin.bench import bench
from jetraft.cli.admin.consumers import consumer
from jetraft.cli.admin.contexts import context
from jetraft.cli.admin.kv import kv
from jetraft.cli.admin.messages import pub, sub
from jetraft.cli.admin.objects import object_, object_alias
from jetraft.cli.admin.servers import server
from jetraft.cli.admin.streams import stream

PROG = "jetraft"

__all__ = ["cli", "main"]


@click.group(name=PROG, cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-s", "--server", metavar="URL[,URL]",
              help="NATS server URLs (default nats://127.0.0.1:4222, or NATS_URL).")
@click.option("--user", help="User name (or NATS_USER).")
@click.option("--password", help="Password (or NATS_PASSWORD).")
@click.option("--creds", metavar="FILE", help="User credentials file (JWT and seed; or NATS_CREDS).")
@click.option("--context", "context", metavar="NAME",
              help="Use the nats CLI context NAME (~/.config/nats/context/NAME.json).")
@click.option("--context-file", metavar="PATH", help="Use the context file at PATH.")
@click.option("--tlscert", envvar="NATS_CERT", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="TLS client certificate file (or NATS_CERT).")
@click.option("--tlskey", envvar="NATS_KEY", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="TLS client private key file (or NATS_KEY).")
@click.option("--tlsca", envvar="NATS_CA", metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="TLS certificate authority chain file the server is verified against (or NATS_CA).")
@click.option("--tlsfirst/--no-tlsfirst", default=None,
              help="Perform the TLS handshake before expecting the server greeting.")
@click.option("--timeout", type=click.FloatRange(min=0.01), metavar="SECONDS",
              help="Time to wait for the server: connecting and each request (default 5).")
@click.option("--json", "json_out", is_flag=True, help="Print JSON instead of text where a command has it.")
@click.version_option(__version__, "-v", "--version", prog_name=PROG)
@click.pass_context
def cli(ctx: click.Context, **global_opts: object) -> None:
    """Manage JetStream on jetraft or nats-server: streams, consumers, servers, messages,
    Key-Value and Object store buckets."""
    ctx.obj = dict(global_opts)


cli.add_command(stream)
cli.add_command(consumer)
cli.add_command(server)
cli.add_command(pub)
cli.add_command(sub)
cli.add_command(bench)
cli.add_command(context)
cli.add_command(account)
cli.add_command(kv)
cli.add_command(object_)
#: natscli's alias of ``object``, left out of the help.
cli.add_command(object_alias("obj"))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: global options may appear anywhere on the line."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    cli.main(args=hoist_global_options(args, GLOBAL_VALUED, GLOBAL_FLAGS), prog_name=PROG)


if __name__ == "__main__":
    main()
