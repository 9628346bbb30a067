"""Post-deploy validation with Spark: RAFT safety and the message ledger, from the
cluster's own event logs (jetraft.events) and the drills' ledgers (lab/drills.py); for a
fault campaign's run, its checkers over the workloads' histories (lab/workloads.py).

- :mod:`~jetraft.validation.schema` — the explicit schemas of every input;
- :mod:`~jetraft.validation.load` — a run directory into DataFrames;
- :mod:`~jetraft.validation.checks` — the checks, each {valid, count, examples}
  (:mod:`~jetraft.validation.result`);
- :mod:`~jetraft.validation.history` — a fault campaign's histories: schema, reader, pairing;
- :mod:`~jetraft.validation.queueset` — the campaign's queue checks (Jepsen's set checker,
  per-node divergence);
- :mod:`~jetraft.validation.linearizable` — linearizability of a KV key and its stale reads
  (pure Python), run per key on Spark by :mod:`~jetraft.validation.kvcheck`;
- :mod:`~jetraft.validation.survey` — a local run's files, listed (or refused) before Spark starts;
- :mod:`~jetraft.validation.guide` — what each check's verdict means, and where to look next;
- :mod:`~jetraft.validation.report` — report.json, report.md, timeline.png;
- :mod:`~jetraft.validation.job` — the ``jetraft-validate`` command;
- :mod:`~jetraft.validation.synthetic` — a generator of synthetic runs (tests, benchmark),
  and :mod:`~jetraft.validation.synthetic_history` of campaign histories.

Needs the ``validation`` extra (pyspark, matplotlib) and Java 17; the server itself never
imports this package.
"""
