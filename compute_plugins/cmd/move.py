"""``compute-plugins resize|migrate|confirm|revert|evacuate``: move an
instance to another host (or, resized, the same one), confirm or revert the
move, or move every instance off a host that is down
(:mod:`compute_plugins.scheduler.moves`; ``doc/source/lifecycle.md``).

Against the configured Placement and host-state store, as ``schedule``:
the destination's agent claims the move's decision; the source keeps its
claim (held by a migration consumer) until ``confirm`` frees it, or
``revert`` frees the destination and gives the instance its source claim
back.

``migrate --live`` confirms the move itself once the destination's claim
holds (nova's live migration has no confirm step); one interrupted before
that step ended is finished by a re-run or ``confirm``.

Exit codes: 0 moved (to confirm; live: confirmed), confirmed or reverted,
or done already (a line says so), every instance evacuated; 1 no host took
the move (or one of an evacuation's) (the reasons per host and plugin
are printed; the instance stays where it was), Placement refused the
hand-over (rolled back), the consumer is unknown or
not placed, or a host's agent did not free its side in time (run it
again); 2 bad input, or a move the instance's state refuses (moving
already, a ``--host`` that is unknown or disabled, a move being reverted
confirmed...).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Optional

from compute_plugins.cmd import arguments, common, release, schedule, validate
from compute_plugins.util.text import printable

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.scheduler.moves import FinishResult, Mover, MoveResult

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_UNUSED = "it reads the hosts from Placement and the host-state store"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    uses = ("format", "placement_url")
    resize = arguments.command(
        subparsers, "resize", "resize an instance to a new flavor: the scheduler "
        "decides a host, its agent claims it; to confirm or revert",
        uses=uses, unused=_UNUSED)
    _consumer_argument(resize)
    validate.add_request_arguments(resize)
    _timeout_argument(resize, "each host's answer", "[scheduler] answer_timeout")
    resize.set_defaults(func=run_resize)

    migrate = arguments.command(
        subparsers, "migrate", "move an instance to another host with its own "
        "request: the scheduler decides a host, its agent claims it; to confirm "
        "or revert (--live: confirmed by the command)", uses=uses, unused=_UNUSED)
    _consumer_argument(migrate)
    migrate.add_argument("--host", metavar="NAME",
                         help="the destination (still checked by the scheduler)")
    migrate.add_argument("--live", action="store_true",
                         help="a live migration: also print the destination's "
                         "guest XML (its pinning, pages and devices), and confirm "
                         "it once the destination's claim holds (the source freed); "
                         "a re-run finishes one whose confirm did not end")
    _timeout_argument(migrate, "each host's answer", "[scheduler] answer_timeout; "
                      "--live's confirm: [compute] release_timeout")
    migrate.set_defaults(func=run_migrate)

    evacuate = arguments.command(
        subparsers, "evacuate", "move every instance off a host whose agent is "
        "down: the host fenced (disabled), each instance placed elsewhere",
        uses=uses, unused=_UNUSED)
    evacuate.add_argument("--host", required=True, metavar="NAME",
                          help="the host to evacuate (its agent down)")
    evacuate.add_argument("--force-down", action="store_true",
                          help="the host is down (an operator's statement), "
                          "whatever its agent's lease says")
    _timeout_argument(evacuate, "each host's answer", "[scheduler] answer_timeout")
    evacuate.set_defaults(func=run_evacuate)

    for name, summary, func in (
            ("confirm", "confirm an instance's move: the host it left frees its "
             "claim and allocation", run_confirm),
            ("revert", "revert an instance's move: the destination frees its claim, "
             "the instance keeps its claim on the host it came from", run_revert)):
        parser = arguments.command(subparsers, name, summary, uses=uses, unused=_UNUSED)
        _consumer_argument(parser)
        _timeout_argument(parser, "the host's agent", "[compute] release_timeout")
        parser.set_defaults(func=func)


def _consumer_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--consumer", required=True, type=release.consumer_uuid, metavar="UUID",
                        help="the consumer (instance) uuid")


def _timeout_argument(parser: argparse.ArgumentParser, what: str, default: str) -> None:
    parser.add_argument("--timeout", type=arguments.seconds, metavar="S",
                        help="seconds to wait for %s (default: %s)" % (what, default))


def _error(line: str, code: int) -> int:
    print("compute-plugins: error: %s" % printable(line), file=sys.stderr)
    return code


def _mover(conf: cfg.ConfigOpts, placement: Any, store: Any) -> Mover:
    from compute_plugins.scheduler.moves import Mover

    manager = common.plugin_manager(conf)
    return Mover(conf, manager.plugins, placement, store)


def run_resize(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.request.errors import RequestInputError, RequestValidationError
    from compute_plugins.request.spec import RequestSpec

    try:
        inputs = validate.request_input(args)
    except RequestInputError as err:
        return _error(str(err), EXIT_USAGE)
    manager = common.plugin_manager(conf)
    try:
        spec = RequestSpec.build(manager.plugins, inputs)
    except RequestValidationError as err:
        return _error("invalid request: %s" % "; ".join(str(p) for p in err.problems),
                      EXIT_USAGE)
    return _moving(conf, args, lambda mover: mover.resize(args.consumer, spec,
                                                          timeout=args.timeout))


def run_migrate(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    return _moving(conf, args, lambda mover: mover.migrate(
        args.consumer, args.host, live=args.live, timeout=args.timeout,
        confirm_timeout=args.timeout))


def _moving(conf: cfg.ConfigOpts, args: argparse.Namespace, call: Any) -> int:
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect
    from compute_plugins.scheduler.moves import MoveError

    with connect.placement_client(conf, args.placement_url) as placement, \
            HostStateStore.from_config(conf) as store:
        mover = _mover(conf, placement, store)
        try:
            result: MoveResult = call(mover)
        except MoveError as err:
            return _error(str(err), err.exit_code)
    return _print_move(mover, args, result)


def _print_move(mover: Mover, args: argparse.Namespace, result: MoveResult) -> int:
    move = result.move
    code = EXIT_OK if result.moved and not result.waiting else EXIT_FAILED
    if args.format == "json":
        doc: dict[str, Any] = {
            "consumer": move.consumer, "kind": move.kind, "migration": move.migration,
            "source": move.source, "dest": move.dest, "status": move.status.value}
        placed = schedule.to_json([result.schedule] if result.schedule else [])
        doc["destination"] = placed["instances"][0] if placed["instances"] else None
        doc["reasons"] = placed["reasons"]
        doc["waiting"] = result.waiting or None
        if result.guest_xml is not None:
            doc["guest_xml"] = result.guest_xml
        common.print_json(doc)
        return code
    if result.schedule is not None:
        schedule._print_text(mover.plugins, [result.schedule])
    if not result.moved:
        common.say("%s: not moved: it stays on host %s (%s rolled back)"
                   % (move.consumer, printable(move.source), move.kind))
        return EXIT_FAILED
    where = "%s from host %s to host %s" % (_done_word(move.kind), printable(move.source),
                                          printable(move.dest))
    if result.confirmed is None:
        common.say("%s: %s, to confirm: `compute-plugins confirm --consumer %s` frees "
                   "host %s (migration consumer %s holds it), `revert` goes back"
                   % (move.consumer, where, move.consumer, printable(move.source),
                      move.migration))
    elif not result.waiting:
        common.say("%s: %s, confirmed: host %s freed (migration consumer %s released)%s"
                   % (move.consumer, where, printable(move.source), move.migration,
                      "; it was already" if result.confirmed.already else ""))
    if result.guest_xml is not None:
        sys.stdout.write(result.guest_xml if result.guest_xml.endswith("\n")
                         else result.guest_xml + "\n")
    if result.waiting:
        return _error("consumer %s: %s, its confirm not finished: %s (or `compute-plugins "
                      "confirm --consumer %s`)" % (move.consumer, where, result.waiting,
                                                    move.consumer), EXIT_FAILED)
    return code


def _done_word(kind: str) -> str:
    return {"resize": "resized", "migrate": "migrated", "live-migrate": "live-migrated",
            "evacuate": "evacuated"}.get(kind, kind)


def run_evacuate(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect
    from compute_plugins.scheduler.moves import MoveError

    with connect.placement_client(conf, args.placement_url) as placement, \
            HostStateStore.from_config(conf) as store:
        mover = _mover(conf, placement, store)
        try:
            done = mover.evacuate(args.host, force_down=args.force_down,
                                  timeout=args.timeout)
        except MoveError as err:
            return _error(str(err), err.exit_code)
    code = EXIT_OK if done.evacuated else EXIT_FAILED
    if args.format == "json":
        placed = schedule.to_json([m.schedule for m in done.moves if m.schedule])
        common.print_json({
            "host": done.host, "fence": done.fence.to_dict() if done.fence else None,
            "instances": [{"consumer": m.move.consumer, "migration": m.move.migration,
                           "status": m.move.status.value, "dest": m.move.dest}
                          for m in done.moves],
            "reasons": placed["reasons"], "skipped": dict(done.skipped)})
        return code
    for result in done.moves:
        move = result.move
        if result.move.dest is not None:
            common.say("%s: evacuated from host %s to host %s (its allocation on host "
                       "%s deleted)" % (move.consumer, printable(move.source),
                                        printable(move.dest), printable(move.source)))
        else:
            if result.schedule is not None:
                schedule._print_text(mover.plugins, [result.schedule])
            common.say("%s: not moved: it stays on host %s" % (
                move.consumer, printable(move.source)))
    for consumer, why in done.skipped.items():
        common.say("%s: not moved: %s" % (consumer, printable(why)))
    moved = sum(1 for m in done.moves if m.move.dest is not None)
    common.say("host %s fenced (disabled: no new instance; its agent drops the "
               "evacuated claims when it is back, then `host enable` it): %d of %d "
               "instance(s) moved" % (printable(done.host), moved,
                                      len(done.moves) + len(done.skipped)))
    return code


def run_confirm(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    return _finishing(conf, args, "confirm")


def run_revert(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    return _finishing(conf, args, "revert")


def _finishing(conf: cfg.ConfigOpts, args: argparse.Namespace, verb: str) -> int:
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect
    from compute_plugins.scheduler.moves import MoveError

    timeout = conf.compute.release_timeout if args.timeout is None else args.timeout
    with connect.placement_client(conf, args.placement_url) as placement, \
            HostStateStore.from_config(conf) as store:
        mover = _mover(conf, placement, store)
        try:
            done: FinishResult = (mover.confirm if verb == "confirm"
                                  else mover.revert)(args.consumer, timeout=timeout)
        except MoveError as err:
            return _error(str(err), err.exit_code)
    return _print_finish(args, verb, done)


def _print_finish(args: argparse.Namespace, verb: str, done: FinishResult) -> int:
    move = done.move
    if args.format == "json":
        common.print_json({"consumer": move.consumer, "kind": move.kind,
                           "migration": move.migration, "source": move.source,
                           "dest": move.dest, "status": move.status.value,
                           "done": done.done, "already": done.already,
                           "waiting": done.waiting or None})
        return EXIT_OK if done.done else EXIT_FAILED
    if not done.done:
        return _error("consumer %s: %s requested, not finished: %s"
                      % (move.consumer, verb, done.waiting), EXIT_FAILED)
    line: Optional[str] = None
    if done.already:
        line = "consumer %s: already %s (%s); nothing changed" % (
            move.consumer, move.status.value, move.describe())
    elif verb == "confirm":
        line = ("consumer %s: %s confirmed: host %s freed (migration consumer %s "
                "released); the instance is on host %s"
                % (move.consumer, move.kind, move.source, move.migration, move.dest))
    else:
        line = ("consumer %s: %s reverted: %sthe instance keeps its claim on host %s"
                % (move.consumer, move.kind,
                   "host %s freed; " % move.dest if move.dest else "", move.source))
    common.say(printable(line))
    return EXIT_OK


__all__ = ["register"]
