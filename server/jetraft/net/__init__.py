"""Everything wired to trio and sockets, in folders by concern: :mod:`.transport` (clients,
the router, routes, TLS), :mod:`.raft` (the RAFT runtime), :mod:`.jetstream` (JetStream's
glue) and :mod:`.monitoring`; :mod:`.ports` holds the Protocols through which they see the
server."""
