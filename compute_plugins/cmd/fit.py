"""``compute-plugins fit``: would this request fit on this host, and how?

An offline what-if on one host, without Placement: the host is discovered
with the enabled plugins, the request is parsed once into a RequestSpec,
each plugin builds its host state (``host_state``) under the assignments
already on the host (``--usage``), then every plugin's ``fit`` runs
(:meth:`compute_plugins.runtime.PluginSet.fit`, no Placement mappings: each
plugin chooses its providers) and the guest XML is built from the
assignments (:mod:`compute_plugins.compute.guest`).

``--usage FILE``: a JSON list of the ``assignments`` objects this command
prints (``[{"numa": {...}, "vgpu": {...}}, ...]``), one per guest already on
the host.

Output (``--format json``), exactly::

    {"fits": true|false,
     "assignments": {"<plugin>": <its assignment as in the RequestSpec JSON>},
     "reasons": [{"plugin": ..., "provider": ..., "reason": ...}],
     "guest_xml": "<domain ...>" | null}

``assignments`` is empty and ``guest_xml`` null when the request does not
fit; ``reasons`` is empty when it does. Text: a line per guest node or
device (each plugin's ``describe``) and a summary of the guest XML, or the
reasons.

Exit codes: 0 it fits, 1 it does not (or the guest XML cannot be built),
2 bad input: a file that cannot be read, an invalid request, a usage file
that is not a list of assignments, names a plugin that is not enabled, or
does not hold on the host (a CPU the host lacks, one pinned twice). Bad input
is said on stderr, one line per problem, nothing on stdout.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from compute_plugins.cmd import arguments, common, validate
from compute_plugins.util.text import capped, printable

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.host.model import HostInfo
    from compute_plugins.request.groups import PluginAssignment
    from compute_plugins.request.spec import RequestSpec
    from compute_plugins.runtime import FitResult, PluginSet
    from compute_plugins.runtime.manager import PluginManager

LOG = logging.getLogger(__name__)

EXIT_FITS, EXIT_NO_FIT, EXIT_USAGE = 0, 1, 2

#: The domain name when neither ``--name`` nor the flavor gives one.
DEFAULT_NAME = "guest"


class BadInput(Exception):
    """Input the command cannot use; each line is said on stderr (exit 2)."""

    def __init__(self, *lines: str) -> None:
        self.lines = lines
        super().__init__("; ".join(lines))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "fit", "say whether a request fits on this host, and how: "
        "every plugin's decision and the guest XML (no Placement)",
        uses=("format", "libvirt_uri", "host_snapshot"),
        unused="it decides on this host alone, without Placement")
    validate.add_request_arguments(parser)
    parser.add_argument(
        "--usage", metavar="USAGE.json",
        help="assignments already on the host: a JSON list of the "
        "'assignments' objects this command prints, one per guest")
    parser.add_argument("--name", metavar="NAME",
                        help="the guest's domain name (default: the flavor's "
                        "name, else %r)" % DEFAULT_NAME)
    parser.set_defaults(func=run)


def read_usage(doc: Any, plugins: PluginSet, path: str
               ) -> dict[str, list[PluginAssignment]]:
    """Each plugin's assignments in force, from a ``--usage`` document.

    :param doc: the parsed ``--usage`` file.
    :param plugins: the loaded plugins, by name.
    :param path: the file, for messages.
    :raises BadInput: not a list of objects; a plugin not loaded or that
        has no assignment type; an assignment of the wrong shape.
    """
    from compute_plugins.request.types import CodecError, decode

    if not isinstance(doc, list):
        raise BadInput("usage file %s: expected a JSON list of assignments "
                       "objects (the 'assignments' that fit prints), got %s"
                       % (path, _json_type(doc)))
    usage: dict[str, list[PluginAssignment]] = {}
    for index, item in enumerate(doc):
        where = "usage[%d]" % index
        if not isinstance(item, dict):
            raise BadInput("usage file %s: %s: expected an object of plugin "
                           "name -> assignment, got %s"
                           % (path, where, _json_type(item)))
        if "fits" in item and "assignments" in item:
            raise BadInput("usage file %s: %s is a whole fit output; list its "
                           "'assignments' object instead" % (path, where))
        for name, body in item.items():
            if name not in plugins:
                raise BadInput("usage file %s: %s names plugin %r, which is "
                               "not enabled (enabled: %s)"
                               % (path, where, name, ", ".join(plugins) or "none"))
            kind = plugins.assignment_type(name)
            if kind is None:
                raise BadInput("usage file %s: %s: plugin %s makes no "
                               "assignments" % (path, where, name))
            try:
                assignment = decode(kind, body, "%s.%s" % (where, name))
            except CodecError as err:
                raise BadInput("usage file %s: %s" % (path, err)) from None
            usage.setdefault(name, []).append(assignment)
    return usage


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _domain_type(host: HostInfo) -> str:
    """libvirt's test driver only defines ``test`` domains; real hosts kvm."""
    return "test" if host.source.startswith("test:") else "kvm"


def decide(manager: PluginManager, host: HostInfo, spec: RequestSpec,
           usage: Mapping[str, Sequence[PluginAssignment]], path: str,
           name: str) -> tuple[FitResult, RequestSpec, str | None]:
    """Every plugin's fit on the host's states under ``usage``; the spec
    with the decision recorded and the guest XML when it fits.

    :raises BadInput: the usage does not hold on the host
        (:class:`AssignmentConflict`).
    """
    from compute_plugins.compute import guest
    from compute_plugins.plugin.state import AssignmentConflict
    from compute_plugins.request.groups import Decision
    from compute_plugins.runtime import FitResult

    try:
        states, broken = manager.host_states(host.hostname, usage, strict=True,
                                             host=host.hostname)
    except AssignmentConflict as err:
        raise BadInput("usage file %s does not hold on host %s: %s"
                       % (path, host.hostname, err)) from None
    broken = [r for r in broken if r.plugin in spec.requests]
    result = manager.plugins.only(states).fit(states, spec, host=host.hostname)
    if broken:
        result = FitResult(rejections=tuple(broken) + result.rejections)
    if not result.fits:
        return result, spec, None
    decided = spec.with_decision(Decision(host=host.hostname, nodename=host.hostname,
                                          assignments=result.assignments))
    xml = guest.domain_xml(decided, result.assignments, manager.plugins, name=name,
                           domain_type=_domain_type(host))
    return result, decided, xml


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.request.errors import RequestInputError, RequestValidationError
    from compute_plugins.request.inputs import check_name
    from compute_plugins.request.spec import RequestSpec

    try:
        if args.name is not None:
            check_name(args.name, "--name")
        inputs = validate.request_input(args)
        usage_doc = validate.load_json(args.usage, "usage") if args.usage else []
    except RequestInputError as err:
        return _bad(str(err))
    manager = common.plugin_manager(conf)
    try:
        usage = read_usage(usage_doc, manager.plugins, args.usage)
    except BadInput as err:
        return _bad(*err.lines)
    host = common.discover(conf, args)
    manager.discover(host)
    manager.raise_config_errors()
    common.report_degraded(manager)
    try:
        spec = RequestSpec.build(manager.plugins, inputs)
    except RequestValidationError as err:
        return _bad("invalid request: %d problem(s)" % len(err.problems),
                    *capped(["  %s" % problem for problem in err.problems]))
    name = args.name or spec.flavor.name or DEFAULT_NAME
    try:
        result, decided, xml = decide(manager, host, spec, usage, args.usage, name)
    except BadInput as err:
        return _bad(*err.lines)
    assignments = (decided.to_dict()["decision"]["assignments"]
                   if decided.decision is not None else {})
    if args.format == "json":
        common.print_json({
            "fits": result.fits,
            "assignments": assignments,
            "reasons": [{"plugin": r.plugin, "provider": r.provider,
                         "reason": r.reason} for r in result.rejections],
            "guest_xml": xml,
        })
    else:
        _print_text(manager, host, decided, result, xml)
    return EXIT_FITS if result.fits else EXIT_NO_FIT


def _bad(*lines: str) -> int:
    common.error(*lines)
    return EXIT_USAGE


def _print_text(manager: PluginManager, host: HostInfo, spec: RequestSpec,
                result: FitResult, xml: str | None) -> None:
    from compute_plugins.compute import guest

    flavor = "flavor %s: %d vCPU%s, %d MiB" % (
        printable(spec.flavor.name or "(unnamed)"), spec.flavor.vcpus,
        "" if spec.flavor.vcpus == 1 else "s", spec.flavor.memory_mb)
    if not result.fits:
        common.say("does not fit on host %s (%s):" % (host.hostname, flavor))
        for rejection in result.rejections:
            where = " [%s]" % rejection.provider if rejection.provider else ""
            common.say("  %s: %s%s" % (rejection.plugin, rejection.reason, where))
        return
    common.say("fits on host %s (%s)" % (host.hostname, flavor))
    for name in manager.plugins.order:
        request = spec.requests.get(name)
        if request is None:
            continue
        assignment = result.assignments.get(name)
        if assignment is None:
            common.say("  %s: nothing to choose on the host" % name)
            continue
        for line in manager.plugins.describe(name, request, assignment):
            common.say("  %s: %s" % (name, line))
    if xml is not None:
        common.say("guest XML (--format json prints it whole):")
        for line in guest.summary(xml).splitlines():
            common.say("  " + line)
