"""``compute-plugins validate``: check a flavor/image/ports against every
plugin's rules and print the derived Placement query.

Exit codes: 0 the request is valid (the query is printed), 1 it breaks rules
(every problem is printed: key, value, rule), 2 an input file is unusable
(not JSON, a flavor without ``vcpus``/``memory_mb``...).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from compute_plugins.cmd import arguments, common
from compute_plugins.util.text import capped, printable

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.request.inputs import RequestInput

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "validate", "check a flavor (and image, ports) against "
        "every plugin's rules; print every problem, or the Placement query",
        uses=("format",), unused="it checks the request alone, without a host "
        "or Placement")
    add_request_arguments(parser)
    parser.set_defaults(func=run)


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """``--flavor``, ``--image``, ``--port``, ``--hints`` (read by
    :func:`request_input`); ``fit`` takes them too."""
    parser.add_argument("--flavor", required=True, metavar="FLAVOR.json",
                        help="the flavor: vcpus, memory_mb, root_gb, "
                        "ephemeral_gb, swap (MiB), extra_specs")
    parser.add_argument("--image", metavar="IMAGE.json",
                        help="the image: its properties, or an object with "
                        "'properties' (and 'name')")
    parser.add_argument("--port", action="append", default=[], metavar="PORT.json",
                        help="a requested port (vnic_type, physnet, "
                        "min_kbps_egress, min_kbps_ingress, tunneled) or a "
                        "list of them; repeatable")
    parser.add_argument("--hints", metavar="HINTS.json", help="scheduler hints")


def load_json(path: str, what: str) -> Any:
    """The JSON document in ``path`` (regular files only, bounded depth);
    :class:`RequestInputError` naming ``what`` and the file otherwise."""
    from compute_plugins.request.errors import RequestInputError
    from compute_plugins.util import files, jsonload

    try:
        return jsonload.loads(files.read_bytes(path))
    except files.UnreadableFile as err:
        raise RequestInputError("cannot read the %s file %s: %s"
                                % (what, path, err.reason.removeprefix(
                                    "cannot read: "))) from None
    except jsonload.JSONInputError as err:
        raise RequestInputError("the %s file %s is not JSON: %s"
                                % (what, path, err)) from None


def request_input(args: argparse.Namespace) -> RequestInput:
    """The request named by :func:`add_request_arguments`' options.

    :raises RequestInputError: a file cannot be read, is not JSON or is not
        a flavor/image/port/hints document.
    """
    from compute_plugins.request.inputs import RequestInput

    flavor = load_json(args.flavor, "flavor")
    image = load_json(args.image, "image") if args.image else None
    ports: list[Any] = []
    for path in args.port:
        doc = load_json(path, "port")
        ports.extend(doc if isinstance(doc, list) else [doc])
    hints = load_json(args.hints, "hints") if args.hints else None
    return RequestInput.from_dicts(flavor, image, ports, hints)


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.plugin.contract import describe_fields
    from compute_plugins.request.errors import RequestInputError, RequestValidationError
    from compute_plugins.request.spec import RequestSpec
    from compute_plugins.scheduler.query import preview

    try:
        inputs = request_input(args)
    except RequestInputError as err:
        common.error(str(err))
        return EXIT_USAGE
    manager = common.plugin_manager(conf)
    try:
        spec = RequestSpec.build(manager.plugins, inputs)
    except RequestValidationError as err:
        if args.format == "json":
            common.print_json({"valid": False, **err.to_dict()})
        else:
            common.say("invalid request: %d problem(s)" % len(err.problems))
            # NOTE: str(problem) escapes what is not printable.
            for line in capped(["  %s" % problem for problem in err.problems]):
                common.say(line)
        return EXIT_INVALID
    query = preview(spec)
    if args.format == "json":
        common.print_json({"request_spec": spec.to_dict(),
                           "placement_query": query.to_dict()})
    else:
        common.say("valid request: flavor %s, %d vCPU(s), %d MiB"
              % (printable(spec.flavor.name or "(unnamed)"), spec.flavor.vcpus,
                 spec.flavor.memory_mb))
        for name, request in spec.requests.items():
            for line in describe_fields(request):
                common.say("  %s: %s" % (name, printable(line)))
        common.say("placement query (microversion %s):" % query.microversion)
        common.say(str(query))
    return EXIT_OK
