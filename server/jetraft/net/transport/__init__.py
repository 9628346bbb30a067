"""Transport: client connections (:mod:`.client`), the router that decides where each
message goes (:mod:`.router`), the route mesh between servers (:mod:`.route`,
:mod:`.route_conn`, :mod:`.route_interest`) and TLS (:mod:`.tls`). The publish path: it
imports nothing of the monitoring."""
