"""Monitoring: the HTTP endpoints (:mod:`.monitor`), Prometheus metrics (:mod:`.metrics`) and
the ``$SYS.REQ`` requests (:mod:`.sysreq`). Nothing of the publish path imports it."""
