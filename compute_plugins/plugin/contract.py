"""The contract every resource plugin implements.

A plugin is a class registered under the ``compute_plugins.resources``
entry-point namespace. The :class:`~compute_plugins.runtime.manager.PluginManager`
constructs it with the service's ``ConfigOpts`` (never a global), then, every
periodic:

1. ``discover(host)`` turns the host's facts into the plugin's own immutable
   *view* (only what it needs, already filtered by its configuration);
2. ``provider_contributions(view, nodename)`` says which providers, inventory,
   traits and aggregates the plugin owns in the tree. The manager merges all
   plugins' contributions into the provider tree (nova's
   ``update_provider_tree`` semantics) and keeps what others own.

Both are pure functions of their arguments, so the same code runs on a live
host, on a recorded snapshot and in the scheduler's copy of a host.

The request side (all optional; defaults suit a plugin without keys):

3. ``parse_request(request_input)`` parses the plugin's keys once into its
   typed request; ``request_groups(request)`` is its share of the Placement
   query; ``sample_requests()`` offers a few requests it understands to
   the conformance kit (:mod:`compute_plugins.testing`);
4. ``host_state(view, providers, assignments)`` says what is free and used on
   the host given the assignments in force (JSON, versioned: the scheduler
   holds it in another process);
5. ``fit(state, request, mappings, earlier)`` decides exactly what the guest
   gets (pure, deterministic, no I/O) or says why not (a :class:`Rejection`);
   ``alternatives(state, request, mappings, earlier)`` offers other valid
   decisions, best first, for when a later plugin rejects the first;
   ``verify(state, request, assignment)`` tests a recorded decision with the
   same code; ``guest_config(request, assignment)`` turns the decision into
   libvirt domain XML fragments; ``describe(request, assignment)`` says it
   in a few lines for people (``compute-plugins fit``).
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, Optional, TypeVar, Union

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.state import PluginState
from compute_plugins.request.groups import PluginAssignment, PluginRequest, RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import encode
from compute_plugins.tree.contribution import ProviderContribution, Providers

ViewT = TypeVar("ViewT")
RequestT = TypeVar("RequestT", bound=PluginRequest)
StateT = TypeVar("StateT")
AssignmentT = TypeVar("AssignmentT", bound=PluginAssignment)

#: The chosen allocation's request-group suffix -> provider uuids (Placement
#: 1.34 ``mappings``); ``None`` offline, where the plugin picks providers.
Mappings = Optional[Mapping[str, Sequence[str]]]
#: The assignments of the plugins whose ``fit`` ran before, by plugin name.
Earlier = Mapping[str, PluginAssignment]


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why a plugin cannot give a request what it asks on a host.

    :param reason: a sentence a person understands, naming the cell or
        device and the numbers ("host cell 1 has 2 free dedicated CPUs,
        guest node 0 needs 3").
    :param provider: the provider (uuid or name) it concerns, "" for the host.
    :param plugin: the plugin that rejected (:meth:`PluginSet.fit
        <compute_plugins.runtime.PluginSet.fit>` fills it in).
    """

    reason: str
    provider: str = ""
    plugin: str = ""


@dataclasses.dataclass(frozen=True)
class GroupAllocation:
    """What one request group of a plugin takes on one provider.

    The scheduler builds the allocation it writes to Placement (``PUT
    /allocations``) and the decision's ``mappings`` from these: the
    allocation is every group's resources on its provider.

    :param suffix: the request group suffix (``""``: the unsuffixed group).
    :param provider_uuid: the provider that serves it.
    :param resources: resource class -> amount taken there.
    """

    suffix: str
    provider_uuid: str
    resources: Mapping[str, int]


def providers_by_suffix(items: Sequence[Any]) -> dict[str, str]:
    """``{requester_id: provider_uuid}`` of assigned devices (objects with
    both attributes), for :meth:`ResourcePlugin.group_providers`.

    :raises ValueError: one group on two providers (a granular group is
        served by one provider), or a device without its provider.
    """
    result: dict[str, str] = {}
    for item in items:
        suffix, provider = item.requester_id, item.provider_uuid
        if not provider:
            raise ValueError("group %r: the assignment names no provider"
                             % suffix)
        if result.setdefault(suffix, provider) != provider:
            raise ValueError("group %r is assigned providers %s and %s; one "
                             "group is served by one provider"
                             % (suffix, result[suffix], provider))
    return result


#: Where a guest XML fragment goes: directly under ``<domain>`` or under
#: ``<domain><devices>``.
FRAGMENT_PARENTS = ("domain", "devices")


@dataclasses.dataclass(frozen=True)
class GuestFragment:
    """One element of libvirt domain XML a plugin contributes.

    :param parent: ``"domain"`` or ``"devices"`` (see FRAGMENT_PARENTS).
    :param xml: the element, serialised (e.g. ``<cputune>...</cputune>``).
        Elements of the same tag under ``domain`` from several plugins are
        merged by :mod:`compute_plugins.compute.guest`.
    """

    parent: str
    xml: str

    def __post_init__(self) -> None:
        if self.parent not in FRAGMENT_PARENTS:
            raise ValueError("guest fragment parent %r is not one of %s"
                             % (self.parent, ", ".join(FRAGMENT_PARENTS)))


def describe_fields(value: Union[PluginRequest, PluginAssignment]) -> list[str]:
    """Any request or assignment in a few ``field=value`` lines: one for
    its plain fields, one per item of each list of objects (a device, a
    VF, a guest cell...).

    The default of :meth:`ResourcePlugin.describe`; ``validate`` prints
    each plugin's request with it.
    """
    doc = encode(value)
    if not isinstance(doc, Mapping):
        return [json.dumps(doc, sort_keys=True)]

    def pairs(fields: Mapping[str, Any]) -> str:
        return ", ".join("%s=%s" % (key, value if isinstance(value, str)
                                    else json.dumps(value, sort_keys=True))
                         for key, value in fields.items())

    plain: dict[str, Any] = {}
    lines: list[str] = []
    for key, value in doc.items():
        if (isinstance(value, list) and value
                and all(isinstance(item, Mapping) for item in value)):
            lines.extend("%s[%d]: %s" % (key, index, pairs(item))
                         for index, item in enumerate(value))
        else:
            plain[key] = value
    if plain:
        lines.insert(0, pairs(plain))
    return lines


class ResourcePlugin(abc.ABC, Generic[ViewT, RequestT, StateT, AssignmentT]):
    """Base class of resource plugins.

    :param conf: the service's configuration; the plugin's own options are
        registered on it in the group named after the plugin.
    """

    #: Entry-point name; also the name of the plugin's option group.
    name: ClassVar[str]
    #: Version of the plugin's data formats (requests, assignments, state).
    version: ClassVar[str] = "1.0"
    #: The plugin's typed request (its ``parse_request`` returns one), read
    #: back from a serialised spec with it; None: the plugin asks nothing.
    request_type: ClassVar[Optional[type[PluginRequest]]] = None
    #: The plugin's assignment (its ``fit`` decides one); None: it decides
    #: nothing beyond Placement's allocation.
    assignment_type: ClassVar[Optional[type[PluginAssignment]]] = None
    #: The plugin's host state (its ``host_state`` builds one, the store
    #: carries it as JSON); None: it keeps none.
    state_type: ClassVar[Optional[type[PluginState]]] = None
    #: Plugins whose ``fit`` must run before this one's (their assignments
    #: reach this one's ``fit`` as ``earlier``), by name.
    fit_after: ClassVar[tuple[str, ...]] = ()
    #: Roles this plugin's assignments fill for others, e.g.
    #: :data:`compute_plugins.plugin.topology.TOPOLOGY`: its assignment says where
    #: the guest sits (:class:`~compute_plugins.plugin.topology.PlacesGuest`).
    provides: ClassVar[tuple[str, ...]] = ()
    #: Roles whose providers' ``fit`` must run before this one's, whichever
    #: plugins they are, e.g. ``(TOPOLOGY,)`` for a device's affinity to
    #: the guest's cells (read with
    #: :func:`compute_plugins.plugin.topology.guest_topology`).
    needs: ClassVar[tuple[str, ...]] = ()
    #: The flavor extra-spec keys this plugin owns (a trailing ``*``
    #: matches any rest: ``hw:numa_cpus.*``). Declared so that where the
    #: plugin is installed but not enabled, a flavor with one of them is
    #: refused naming the plugin to enable, not as an unknown key
    #: (:func:`compute_plugins.request.generic.unknown_keys`).
    owned_keys: ClassVar[tuple[str, ...]] = ()
    #: Whether ``discover`` and ``provider_contributions`` depend on their
    #: arguments alone (and on options, which cannot change while the
    #: service runs). The manager then keeps the view while the host facts
    #: are equal and the contribution while the view is the same object,
    #: so a steady periodic rebuilds nothing. Set it False when either
    #: reads anything else (a device file, the clock, a mutable attribute).
    pure: ClassVar[bool] = True

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        # NOTE: plugins read framework options ([compute], [compute_plugins]).
        conf_areas.register_all(conf)
        self.conf = conf
        for group, opts in self.list_opts():
            conf.register_opts(opts, group=group)

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        """The plugin's options, registered in the group ``[<name>]``."""
        return []

    @classmethod
    def list_opts(cls) -> list[tuple[str, list[cfg.Opt]]]:
        """``(group, opts)`` pairs for registration and the sample config."""
        opts = cls.options()
        return [(cls.name, opts)] if opts else []

    @property
    def options_group(self) -> Any:
        """This plugin's option group on ``self.conf``."""
        return self.conf[self.name]

    @abc.abstractmethod
    def discover(self, host: HostInfo) -> ViewT:
        """Return this plugin's immutable view of ``host``.

        Raise :class:`compute_plugins.exception.ComputePluginsError` with a
        clear message when the host cannot be used (e.g. a configured device
        is missing); the manager then keeps the previous view.
        """

    @abc.abstractmethod
    def provider_contributions(
        self, view: ViewT, nodename: str
    ) -> Sequence[ProviderContribution]:
        """Return the providers, inventory and traits this plugin owns.

        The compute root is named ``nodename``; contribute to it with a
        :class:`ProviderContribution` whose ``name`` is ``nodename``.
        """

    # -- the request side (RequestSpec); optional for plugins without keys --

    def parse_request(self, request_input: RequestInput) -> Optional[RequestT]:
        """Parse this plugin's keys of a request into its typed request.

        Return ``None`` when the request asks nothing of this plugin. Raise
        the request-spec validation error listing every problem otherwise.
        """
        return None

    def request_groups(self, plugin_request: RequestT) -> list[RequestGroup]:
        """This plugin's share of the Placement query for ``plugin_request``."""
        return []

    def sample_requests(self) -> Sequence[RequestInput]:
        """A few representative requests this plugin understands, for the
        conformance kit (:mod:`compute_plugins.testing`), which cannot make
        up requests for keys it does not know.

        Each asks something of this plugin through its own keys (flavor
        extra specs, image properties, ports), with the keys of the plugins
        it runs after (``fit_after``) where it needs them. The kit parses
        each as it is and at other flavor sizes, fits them on hosts, and
        fills hosts with them. Default: none (the kit then says it skipped
        the checks that need requests).
        """
        return ()

    # -- the decision: state, fit, verify, guest config -------------------------

    def host_state(self, view: ViewT, providers: Providers,
                   assignments: Sequence[AssignmentT]) -> Optional[StateT]:
        """What is free and used on the host under ``assignments``.

        Immutable and JSON round-trip (the runtime encodes it with the
        plugin's ``version``). ``providers`` are the plugin's own providers
        on the node (its contributions' names -> their uuids as the tree has
        them, the root included: :class:`Providers`), the uuids the state
        names (what the scheduler's allocations and mappings name).
        :raises compute_plugins.plugin.state.AssignmentConflict: two assignments use
            the same unit (a CPU pinned twice) or one names what the host
            lacks.
        """
        return None

    def fit(self, state: StateT, request: RequestT, mappings: Mappings,
            earlier: Earlier) -> Union[AssignmentT, Rejection, None]:
        """Decide exactly what ``request`` gets on the host in ``state``.

        Pure, deterministic, no I/O. ``mappings`` restricts the choice to the
        providers Placement allocated (None: choose them). Return the
        assignment, a :class:`Rejection`, or ``None`` when there is nothing
        to decide beyond Placement's allocation.
        """
        return None

    def alternatives(self, state: StateT, request: RequestT,
                     mappings: Mappings, earlier: Earlier
                     ) -> Iterator[AssignmentT]:
        """Valid assignments of ``request``, best first: ``fit``'s answer
        first, then others that differ in what a later plugin may care
        about (e.g. another set of host cells, for a device's affinity).
        :meth:`compute_plugins.runtime.PluginSet.fit` tries a later
        plugin that rejects over these. Keep them few and distinct (no
        permutations of equivalent choices). The default: ``fit``'s answer
        alone (nothing when it is a rejection or None)."""
        outcome = self.fit(state, request, mappings, earlier)
        if outcome is not None and not isinstance(outcome, Rejection):
            yield outcome

    def verify(self, state: StateT, request: RequestT,
               assignment: AssignmentT) -> Optional[Rejection]:
        """``None`` when the recorded ``assignment`` is still valid on
        ``state``, else why not. Built from the same checks as ``fit``."""
        return None

    def group_providers(self, request: RequestT, assignment: AssignmentT,
                        state: StateT) -> Optional[Mapping[str, str]]:
        """Request group suffix -> the provider ``assignment`` uses for it.

        Offline fits (``mappings=None``) choose providers themselves; the
        scheduler turns this into the allocation it writes (each of the
        plugin's groups whole on its provider). ``None``: the plugin does
        not say, and the scheduler picks, for each of its groups, a provider
        Placement said has room (the root first).
        """
        return None

    def allocations(self, request: RequestT, assignment: AssignmentT,
                    state: StateT) -> Optional[Sequence[GroupAllocation]]:
        """What each of the plugin's request groups takes on which provider.

        The default puts each group of ``request_groups(request)`` whole on
        the provider :meth:`group_providers` names; override it where a
        group has *choices* (the assignment says which one) or is spread
        over several providers. ``None``: the plugin does not say (see
        :meth:`group_providers`).
        """
        providers = self.group_providers(request, assignment, state)
        if providers is None:
            return None
        result = []
        for group in self.request_groups(request):
            if not group.resources or group.requester_id not in providers:
                continue
            result.append(GroupAllocation(group.requester_id,
                                          providers[group.requester_id],
                                          dict(group.resources)))
        return result

    def utilization(self, state: StateT) -> Optional[float]:
        """How full the host is for this plugin, 0.0 (idle) to 1.0 (full),
        for the scheduler's weighers (pack or spread); None: no opinion."""
        return None

    def guest_config(self, request: RequestT,
                     assignment: AssignmentT) -> Sequence[GuestFragment]:
        """The libvirt domain XML this assignment asks for."""
        return ()

    def describe(self, request: RequestT, assignment: AssignmentT) -> Sequence[str]:
        """``assignment`` for people: a line per guest node or device
        (``compute-plugins fit``). The default lists the assignment's
        fields (:func:`describe_fields`)."""
        return describe_fields(assignment)
