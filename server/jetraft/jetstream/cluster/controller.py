"""The JetStream cluster controller: every decision of clustered JetStream, with no I/O.

In the shape of the RAFT core (:mod:`jetraft.raft.node`): the controller reads the world
through a :class:`ClusterView` (RAFT groups' leaders and peers, the routes' peers,
subscription interest) and is driven by inputs, each carrying the time where it matters:

- :meth:`ClusterController.handle` - an inbound message: a ``$JS.API`` request, an ack or
  flow-control message, or a publish to a stream's subject;
- :meth:`ClusterController.meta_change` - one change of an applied meta entry;
- :meth:`ClusterController.leader_changed` - a stream group elected a leader (or lost it);
- :meth:`ClusterController.peer_changed` - a route came up or went down;
- :meth:`ClusterController.tick` - time passed (bootstrap, reconciliation, consumer timers);
- :meth:`ClusterController.step_down_done` / :meth:`ClusterController.server_remove_done`
  - the outcome of a :class:`StepDown` / :class:`RemoveServer` action.

Each returns a list of actions (:mod:`jetraft.jetstream.cluster.actions`) for the glue (``net/jetstream/cluster.py``) to carry out, in
order: :class:`Send` a reply or delivery, :class:`Propose` an entry to a RAFT group,
:class:`Forward` a request to another server, :class:`OpenReplica` / :class:`CloseReplica`,
:class:`OpenMeta`, :class:`ChangePeer`, :class:`StepDown`, :class:`RemoveServer`,
:class:`SetInterest` (the stream leader's route interest) and :class:`Emit` an event.

Where nats-server does the same: jetstream_cluster.go (meta group, stream assignments,
placement, peer-remove, SERVER.REMOVE, step-down) and jetstream_api.go (which server answers
which request). The parts:

- **API routing**: requests about one stream and its consumers travel on the stream leader's
  interest in those API subjects (on the same route as the publishes and acks before them,
  so a pull request never overtakes an ack). Stream create/delete/update/list/restore,
  peer-remove, SERVER.REMOVE and meta step-down go to the meta leader (:class:`Forward`); a
  RESTORE is assigned with a restorer there (:class:`StartRestore`), and the stream refuses
  publishes and changes (10194) until its restore is done. Replies travel
  back as ordinary messages to the requester's inbox, or through the server the request came
  from while the inbox's interest has not reached the answering server yet
  (:attr:`Send.via`).
- **Placement** (:mod:`jetraft.jetstream.placement`): replicas on online JetStream servers,
  honouring ``unique_tag`` and placement tags; error 10005 when impossible.
- **Reconciliation**: every stream leader drives its group's membership towards the
  assignment's peers one change at a time, removing before adding.

The controller is one class made of its parts, each a module of this package over the shared
state of :class:`~jetraft.jetstream.cluster.core.ControllerCore`: :mod:`.api_routing`,
:mod:`.meta_requests`, :mod:`.replicas`, :mod:`.restores`, :mod:`.placing`,
:mod:`.meta_group` and :mod:`.sources` (mirrors' and sources' links); the meta group's state machine is :mod:`.meta_machine`, beside the
stream's (:mod:`jetraft.jetstream.replicated`).
"""

from __future__ import annotations

from jetraft.jetstream.cluster.api_routing import ApiRouting
from jetraft.jetstream.cluster.meta_group import MetaGroup
from jetraft.jetstream.cluster.meta_requests import MetaRequests
from jetraft.jetstream.cluster.placing import Placing
from jetraft.jetstream.cluster.replicas import ReplicaLifecycle
from jetraft.jetstream.cluster.restores import Restores
from jetraft.jetstream.cluster.sources import SourceFeeds


class ClusterController(ApiRouting, MetaRequests, Restores, ReplicaLifecycle, Placing, MetaGroup, SourceFeeds):
    """Clustered JetStream's decisions on one server (see the module docstring).

    ``server_name``, ``cluster_name``, ``server_tags``, ``unique_tag`` and
    ``system_account`` as configured; ``accounts``: this server's JetStream accounts (created
    ``clustered=True``), by name; ``view``: the world as it is now. ``meta`` is the meta
    group's state (:class:`MetaState`), which the meta group's state machine applies entries
    to; ``override`` the interest a replica sees while it applies an entry.
    """
