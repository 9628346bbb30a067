"""JetStream's glue to trio, RAFT and the routes, each module named after its
:mod:`jetraft.jetstream` counterpart: :mod:`.service` (the JetStream service: accounts,
timers, storage failures), :mod:`.cluster` (carries out the cluster controller's actions),
:mod:`.snapshot` (stream backups and restores), :mod:`.catchup` (a replica fetching store
blocks from its peers), :mod:`.durability` (storage failures and probes) and :mod:`.health`
(``/healthz`` for JetStream)."""
