"""``jetraft-validate RUN``: the post-deploy validation job.

Reads a run's collected event logs, ledgers and drill timeline (see
:mod:`jetraft.validation.load`), runs every check of :mod:`jetraft.validation.checks` and
writes ``report.json``, ``report.md`` and ``timeline.png`` (into RUN, or ``--out``).
Exit status: 0 when no check is invalid, 1 when one is, 2 when the input cannot be read
(a local RUN missing, empty or without an event log is refused before Spark starts).

Spark: ``local[*]`` by default; ``--master`` names any other (``spark://host:7077``,
``yarn``...). Under ``spark-submit`` the master and configuration come from spark-submit::

    spark-submit --master spark://host:7077 --py-files jetraft.whl \\
        $(python -c 'import jetraft.validation.job as j; print(j.__file__)') hdfs:///runs/r1 --out /tmp/r1
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from jetraft.validation import survey

console = Console(stderr=True)


def spark_session(master: str | None, driver_memory: str):
    """A SparkSession for the job: UTC session time, few shuffle partitions on a local
    master, whose Python workers run this interpreter (unless PYSPARK_PYTHON says
    otherwise), no UI. Under spark-submit (PYSPARK_GATEWAY_PORT set), its master is kept."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.appName("jetraft-validate")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not submitted:
        master = master or "local[*]"
        builder = builder.master(master)
    if master and master.startswith("local"):
        # a local master stays on the loopback interface; its Python workers (the KV
        # checks' per-key search) run this interpreter, which imports jetraft
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", str(max(4, 2 * (os.cpu_count() or 2))))
                   .config("spark.driver.memory", driver_memory))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def validate(spark, source: str, out: Path, *, limit: int = 10, skew_ns: int = 0,
             progress=lambda name: None, catchup_limit_s: float | None = None,
             completed=lambda result: None) -> dict:
    """Run every check on ``source``; write the reports into ``out``; return report.json's
    content. ``catchup_limit_s``: seconds a stream catch-up may stay unfinished while its
    server's log goes on (default checks.CATCHUP_LIMIT_S). ``progress(text)`` is told what
    starts; ``completed(result)`` gets each check's checks.CheckResult as it ends. Raises
    jetraft.validation.load.InputError when there is no event log."""
    from pyspark.sql import functions as F

    from jetraft.validation import checks, load, report

    started = time.monotonic()
    progress("reading the event logs (two passes: every event, then the applied entries)...")
    inp = load.read(spark, source)
    read_s = time.monotonic() - started
    progress(f"running the checks (the event logs read in {read_s:.1f} s)...")
    try:
        results = checks.run_all(inp, limit=limit, skew_ns=skew_ns, progress=lambda name: None,
                                 catchup_limit_s=checks.CATCHUP_LIMIT_S if catchup_limit_s is None
                                 else catchup_limit_s, completed=completed)
        out.mkdir(parents=True, exist_ok=True)
        if inp.history_only:
            progress("writing report.json and report.md...")
            doc = report.write_json(out / "report.json", source, results, time.monotonic() - started,
                                    read_s)
            report.write_markdown(out / "report.md", doc, None)
            return doc
        progress("writing report.json, report.md and timeline.png...")
        names = checks.group_names(inp)
        doc = report.write_json(out / "report.json", source, results, time.monotonic() - started,
                                read_s, groups=names)
        elections = [r.asDict() for r in inp.events.where(F.col("event") == "raft_became_leader")
                     .select("group", "server_name", "ns").orderBy("ns").collect()]
        end_ns = inp.events.agg(F.max("ns")).first()[0] or 0
        faults = doc["checks"]["availability"]["details"].get("faults") or []
        drills = ([d.asDict() for d in inp.drills.select("name", "fault_ns", "repair_ns").collect()]
                  if inp.drills is not None and faults else [])
        deleted = {r["group"]: r["ns"] for r in
                   inp.events.where((F.col("event") == "raft_group_closed") & F.col("deleted"))
                   .groupBy("group").agg(F.max("ns").alias("ns")).collect()}
        membership = doc["checks"]["topology"]["details"].get("membership") or []
        drew = report.plot_timeline(out / "timeline.png", elections, drills, end_ns, deleted,
                                    membership=membership, names=names)
        report.write_markdown(out / "report.md", doc, "timeline.png" if drew else None)
        return doc
    finally:
        inp.unpersist()


_EPILOG = f"""\b
Exit status:
  0  no check is invalid (some may be unknown: nothing in the run to decide on)
  1  a check is invalid (report.md says what it means and where to look next)
  2  RUN cannot be read: missing, empty, or without any event log ({survey.EVENTS_GLOB}),
     found before Spark starts for a local RUN; or pyspark is not installed
"""


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=_EPILOG)
@click.argument("run")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where the reports go (default: RUN itself when it is a local directory).")
@click.option("--master", help="Spark master URL (default local[*]; spark-submit's own when submitted).")
@click.option("--driver-memory", default="4g", show_default=True,
              help="Driver memory for a local master.")
@click.option("--examples", default=10, show_default=True, help="Offending examples kept per check.")
@click.option("--clock-skew-ms", default=0.0, show_default=True,
              help="Tolerance for the hosts' clocks in leader completeness (milliseconds).")
@click.option("--catchup-limit-s", default=120.0, show_default=True,
              help="Seconds a stream catch-up may stay unfinished while its server's log goes on.")
def main(run: str, out: Path | None, master: str | None, driver_memory: str, examples: int,
         clock_skew_ms: float, catchup_limit_s: float) -> None:
    """Validate a jetraft run from its own logs: RAFT safety (one leader per term, terms
    never going back, one entry per index, leader completeness), the topology, availability
    through each drill's faults, replicas current, stream catch-ups finished, and the
    acknowledged-message ledger. A fault campaign's run (with history/*.jsonl) is also
    checked as Jepsen would: the queue's lost, duplicated and unexpected values, each
    replica's own copy, each KV key's linearizability and stale reads.

    RUN is a run directory (lab/artifacts/<run>: logs/<host>/events*.jsonl, drills.json,
    *.ledger.jsonl, *.stream.jsonl, topology.json, history/*.jsonl), locally or at any URI
    Spark reads, or a path or glob of .jsonl event logs.

    It prints what it reads, Spark's start, and each check as it ends; then each check's
    verdict and, for an invalid one, what it means, its first offending examples and where
    to look next. report.json (every example, in full), report.md and timeline.png go into
    RUN or --out."""
    started = time.monotonic()
    try:
        found = survey.survey(run)
    except survey.NoEventLog as exc:
        _error(str(exc))
        sys.exit(2)
    say(found.line() if found else f"reading {run} (a URI: its files are listed once Spark runs)")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _error("pyspark is not installed (pip install 'jetraft[validation]')")
        sys.exit(2)
    from jetraft.validation.load import InputError

    if out is None:
        local = Path(run)
        out = local if "://" not in run and local.is_dir() else Path(tempfile.mkdtemp(prefix="jetraft-validate-"))
    say(f"starting Spark ({master or 'local[*]'}; this can take 30 s)...")
    spark = spark_session(master, driver_memory)
    say(f"Spark ready ({time.monotonic() - started:.1f} s)")
    try:
        def progress(text: str) -> None:
            say(f"{text} (at {time.monotonic() - started:.1f} s)")

        def completed(result) -> None:
            mark = {True: "[green]valid[/]", False: "[red]INVALID[/]"}.get(result.valid, "[yellow]unknown[/]") \
                if isinstance(result.valid, bool) else "[yellow]unknown[/]"
            count = f", {result.count} offending" if result.valid is False else ""
            say(f"  {escape(result.name)}: {mark}{count} ({result.seconds:.1f} s)", markup=True)
        try:
            doc = validate(spark, run, out, limit=examples, skew_ns=int(clock_skew_ms * 1e6),
                           progress=progress, catchup_limit_s=catchup_limit_s, completed=completed)
        except InputError as exc:
            _error(str(exc))
            sys.exit(2)
    finally:
        spark.stop()
    print_report(doc)
    say(f"reports: {out / 'report.json'}, {out / 'report.md'} ({time.monotonic() - started:.1f} s)")
    sys.exit(0 if doc["valid"] else 1)


def say(text: str, markup: bool = False) -> None:
    """One progress line on stderr, never wrapped (a pipe reads it whole)."""
    console.print(text, markup=markup, highlight=False, soft_wrap=True)


def _error(text: str) -> None:
    console.print(f"[red]jetraft-validate: {escape(text)}[/]", highlight=False, soft_wrap=True)


#: Examples shown per invalid check in the terminal.
TERMINAL_EXAMPLES = 3


def print_report(doc: dict) -> None:
    """The verdicts on stderr: a table of every check (verdict, offending count, what an
    invalid verdict means); then, for each invalid check, its first offending examples as
    a table and where to look next; for an unknown one, why; then VALID or INVALID."""
    from rich.table import Table

    from jetraft.validation import guide

    wide = Console(stderr=True, width=max(console.width, 140), highlight=False)
    names = doc.get("groups") or {}
    hosts = doc["checks"].get("topology", {}).get("details", {}).get("hosts") or {}
    table = Table("check", "verdict", "offending", "what it checks", title="jetraft validation")
    for name, c in doc["checks"].items():
        mark = {True: "[green]valid[/]", False: "[red]INVALID[/]"}.get(c["valid"], "[yellow]unknown[/]") \
            if isinstance(c["valid"], bool) else "[yellow]unknown[/]"
        table.add_row(name, mark, str(c["count"]), escape(c["doc"]))
    wide.print(table)
    for name, c in doc["checks"].items():
        g = guide.guide(name)
        if c["valid"] is False:
            wide.print(f"\n[bold red]{name} INVALID[/] ({c['count']} offending): {escape(g.meaning)}.")
            headers, rows = guide.evidence(c["examples"], names, rows=TERMINAL_EXAMPLES, width=40)
            if rows:
                ev = Table(*headers, title=f"the first {len(rows)} of {c['count']}", title_justify="left")
                for row in rows:
                    ev.add_row(*(escape(x) for x in row))
                wide.print(ev)
            wide.print("[bold]Next:[/]")
            for step in guide.next_steps(name, c, names, hosts):
                wide.print(f"  - {escape(step)}")
        elif c["valid"] is not True:
            wide.print(f"{name}: unknown ({escape(g.unknown)})")
    wide.print("[green]VALID[/]" if doc["valid"] else
               "[red]INVALID[/] (report.md: each check's meaning, evidence and next steps; "
               "report.json: every example in full)")


if __name__ == "__main__":
    main()
