"""The RAFT runtime on trio: many RAFT groups on one server (:mod:`.host`: group commit,
batched sends over the routes) and one group's handle and snapshot policy (:mod:`.group`),
driving the I/O-free core of :mod:`jetraft.raft`."""
