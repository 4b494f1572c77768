"""``compute-plugins report``: the compute agent's periodic.

Runs the compute agent (:class:`compute_plugins.compute.agent.ComputeAgent`):
each periodic discovers the host, lets the plugins update the provider tree
(nova's ``update_provider_tree``), sends Placement what changed, publishes
the host state when it changed and executes the decisions addressed to the
host (claims, releases); between periodics it polls for decisions every
``[compute] claim_poll_interval``. It prints the Placement calls of each
periodic by method and path template and a ``claims:`` line. SIGHUP
clears the provider cache (the next periodic re-reads the tree from
Placement); SIGTERM and SIGINT stop after the current periodic (SIGINT,
Ctrl-C, as an interrupt: exit 130 and one line; a second one stops at
once). What the plugins contributed is committed
after each periodic that reached Placement and checkpointed in
``[compute_plugins] state_dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, TextIO

from compute_plugins import exception
from compute_plugins.cmd import agent_guard, arguments
from compute_plugins.util.text import printable, wrap_lines

if TYPE_CHECKING:
    from oslo_config import cfg

    from compute_plugins.placement import report as preport
    from compute_plugins.runtime.manager import PluginManager

LOG = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "report",
        "run the compute periodic: discover, update the provider tree, "
        "sync to Placement; print the Placement calls of each periodic",
        uses=("format", "libvirt_uri", "host_snapshot", "placement_url"))
    parser.add_argument("--periodic", type=_positive_int, metavar="N",
                        help="run N periodics, then exit (default: forever)")
    parser.add_argument("--interval", type=arguments.seconds, default=60.0,
                        metavar="S",
                        help="seconds between periodics, >= 0 (default: 60)")
    agent_guard.add_options(parser)
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a whole number" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be at least 1" % text)
    return value




def format_text(result: Any) -> str:
    """``periodic 2: 1 Placement call`` and one line per call template; for
    an agent's result (:class:`~compute_plugins.compute.agent.AgentResult`)
    a ``claims:`` line too (a poll between periodics: that line alone)."""
    periodic = getattr(result, "periodic", result)
    if hasattr(result, "claims_dict"):
        if periodic is None:
            return _format_claims(result, "claims between periodics: ")
        return "\n".join([_format_periodic(periodic),
                          _format_claims(result, "  claims: ")])
    return _format_periodic(result)


def _format_claims(result: Any, head: str) -> str:
    """``  claims: 1 claimed (c1), 1 rejected (c2: numa: ...), 0 released;
    2 host-state writes``."""
    def listed(word: str, names: list[str]) -> str:
        return "%d %s%s" % (len(names), word,
                            " (%s)" % printable(", ".join(names)) if names else "")

    rejected = ["%s: %s" % (c.consumer, "; ".join(
        "%s: %s" % (r.plugin, r.reason) for r in c.reasons) or c.note)
        for c in result.rejected]
    line = "%s%s, %s, %s; %d host-state write%s" % (
        head,
        listed("claimed", [c.consumer for c in result.claimed]),
        listed("rejected", rejected),
        listed("released", [r.consumer for r in result.releases]),
        result.store_writes, "" if result.store_writes == 1 else "s")
    if result.error:
        line += ", FAILED: %s" % printable(result.error)
    for mismatch in getattr(result, "mismatches", ()):
        line += "\n  mismatch: consumer %s: %s" % (mismatch.consumer,
                                                  printable(mismatch.reason))
    return line


def _format_periodic(result: preport.PeriodicResult) -> str:
    head = "periodic %d: %d Placement call%s" % (
        result.periodic, result.total_calls,
        "" if result.total_calls == 1 else "s")
    if result.changed:
        head += ", changed: %s" % printable(", ".join(result.changed))
    if result.error:
        head += ", FAILED: %s" % printable(result.error)
    lines = [head]
    for call, count in sorted(result.calls.items()):
        lines.append("  %4d  %s" % (count, call))
    return "\n".join(lines)


def format_json(result: Any) -> str:
    return json.dumps(result.to_dict(), sort_keys=False)


class Loop:
    """Runs periodics until told to stop; owns the signal handling.

    :param client: the report client.
    :param step: runs one periodic and returns its result.
    :param interval: seconds between periodics.
    :param count: number of periodics, None for forever.
    :param out: where results are printed, one per periodic (default:
        ``sys.stdout`` when the loop is made).
    :param fmt: ``text`` or ``json``.
    :param poll: called every ``poll_interval`` seconds while the loop
        waits between periodics (the agent's poll for decisions); what it
        returns is printed when it did something (``.active``).
    :param poll_interval: seconds between polls.
    :param wake: blocks up to the seconds given, returning True early when
        there is work for :attr:`poll` (the agent's
        :meth:`~compute_plugins.compute.agent.ComputeAgent.wait_for_work`:
        a change the store pushed); False: sleep as usual.
    """

    def __init__(self, client: preport.ReportClient,
                 step: Callable[[], Any],
                 interval: float, count: Optional[int],
                 out: Optional[TextIO] = None, fmt: str = "text",
                 poll: Optional[Callable[[], Any]] = None,
                 poll_interval: float = 1.0,
                 wake: Optional[Callable[[float], bool]] = None) -> None:
        self.client = client
        self.poll = poll
        self.wake = wake
        self.poll_interval = poll_interval
        self.step = step
        self.interval = interval
        self.count = count
        # NOTE: sys.stdout when the loop is made, not when this module was
        # imported: the command run in-process (tests.cli) redirects it.
        self.out = sys.stdout if out is None else out
        self.fmt = fmt
        #: Set by SIGTERM/SIGINT. NOTE: signal handlers only set plain
        #: attributes: a handler runs in the main thread, which may hold a
        #: lock (threading.Event's) at that moment.
        self.stop_requested = False
        #: Set by SIGINT (Ctrl-C): the command exits 130.
        self.interrupted = False
        self.results: list[Any] = []
        #: Set by SIGHUP: re-read the mutable options before the next
        #: periodic.
        self.reload_requested = False

    def on_sighup(self, signum: int, frame: Any) -> None:
        # NOTE: only flags here (clear_cache sets one); the work happens
        # between periodics.
        self.client.clear_cache()
        self.reload_requested = True

    def on_stop(self, signum: int, frame: Any) -> None:
        self.stop_requested = True
        if signum == signal.SIGINT:
            self.interrupted = True
            # NOTE: a second Ctrl-C interrupts the periodic at once
            # (KeyboardInterrupt, exit 130).
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def install_signals(self) -> None:
        """SIGHUP clears the cache; SIGTERM and SIGINT stop after the
        current periodic (a second SIGINT stops at once)."""
        signal.signal(signal.SIGHUP, self.on_sighup)
        signal.signal(signal.SIGTERM, self.on_stop)
        signal.signal(signal.SIGINT, self.on_stop)

    def _print(self, result: Any) -> None:
        print(format_json(result) if self.fmt == "json"
              else wrap_lines(format_text(result)), file=self.out, flush=True)

    def _wait(self, seconds: float) -> None:
        """Sleep ``seconds`` in short steps, returning early on a stop;
        :attr:`poll` every :attr:`poll_interval` meanwhile."""
        end = time.monotonic() + seconds
        next_poll = time.monotonic() + self.poll_interval
        while not self.stop_requested:
            now = time.monotonic()
            left = end - now
            if left <= 0:
                return
            if self.poll is not None and now >= next_poll:
                polled = self.poll()
                next_poll = time.monotonic() + self.poll_interval
                if getattr(polled, "active", False):
                    self._print(polled)
                continue
            wake = min(end, next_poll) if self.poll is not None else end
            pause = max(0.0, min(0.2, wake - now))
            if self.wake is not None and self.poll is not None:
                if self.wake(pause):
                    next_poll = time.monotonic()  # NOTE: pushed: poll now
                    continue
                pause -= time.monotonic() - now  # NOTE: waited already
            time.sleep(max(0.0, pause))

    def run(self) -> int:
        """:returns: 0 when the last periodic succeeded, else 1."""
        done = 0
        while not self.stop_requested:
            result = self.step()
            self.results.append(result)
            self._print(result)
            done += 1
            if self.count is not None and done >= self.count:
                break
            self._wait(self.interval)
        return 0 if self.results and self.results[-1].ok else 1


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    """``report``: the agent's periodics; the exit code.

    The state directory's lock, taken once the options and the host were
    checked, is held until the command returns, however it returns (as
    the kernel drops it when the process exits): a second run in the same
    process (``tests.cli``) is not "another agent", and its file
    descriptor is not left open.
    """
    state_dir_lock: list[Any] = []
    try:
        return _run(conf, args, state_dir_lock)
    finally:
        for held in state_dir_lock:
            held.__exit__(None, None, None)


def _run(conf: cfg.ConfigOpts, args: argparse.Namespace,
         state_dir_lock: list[Any]) -> int:
    # Imported here so that `compute-plugins --help` stays fast.
    from compute_plugins.cmd import common
    from compute_plugins.compute import agent as compute_agent
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.placement import connect
    from compute_plugins.placement import report as preport

    quiet_placement_logs(conf.debug)
    # NOTE: one agent per state directory: its lock (run) goes into
    # state_dir_lock.
    # NOTE: the plugins' contributions become "what they own" only once a
    # periodic reached Placement (commit), and are kept across restarts in
    # the state directory, so a device removed during a failed periodic or
    # while the agent was down still has its providers deleted. The first
    # discovery runs before Placement is contacted, so a host or plugin
    # option error fails fast, and so does a ledger that cannot be read
    # (exit 2: it holds the claims, it is never discarded); the first
    # periodic uses that discovery.
    manager, first, ledger = compute_agent.load_host(
        conf, lambda: common.discover(conf, args),
        check=common.check_values, lock=agent_guard.lock_into(state_dir_lock))
    with connect.placement_client(conf, args.placement_url) as placement, \
            HostStateStore.from_config(conf) as store:
        # NOTE: fail fast, as one line, when Placement cannot be reached or
        # is too old; later outages fail single periodics instead.
        placement.negotiate()
        client = preport.ReportClient(
            placement, conf.compute.resource_provider_association_refresh)
        agent = compute_agent.ComputeAgent(
            manager, client, store, ledger,
            lambda: common.discover(conf, args), first=first,
            claim_poll_interval=conf.compute.claim_poll_interval,
            lease_duration=conf.compute.agent_lease_duration,
            rebuild_ledger=args.rebuild_ledger)

        def step() -> compute_agent.AgentResult:
            if loop.reload_requested:
                loop.reload_requested = False
                reload_mutable(conf, client)
            return agent.run_once()

        loop = Loop(client, step, args.interval, args.periodic,
                    fmt=args.format, poll=agent.poll,
                    poll_interval=conf.compute.claim_poll_interval,
                    wake=agent.wait_for_work)
        loop.install_signals()
        try:
            rc = loop.run()
        finally:
            agent.end_lease()
    degraded = common.report_degraded(manager)
    if loop.interrupted:
        return common.interrupted("stopped after the current periodic")
    return rc or degraded


def reload_mutable(conf: cfg.ConfigOpts,
                   client: preport.ReportClient) -> bool:
    """SIGHUP: re-read the configuration files and the mutable options.

    A daemon survives a bad reload: a malformed file or a bad value is
    logged as one error line and the old values are kept.

    :returns: whether the new values were taken.
    """
    from oslo_config import cfg

    # NOTE: oslo.config keeps the mutable options' values in _mutable_ns;
    # a reload that fails after replacing it (a bad value is only found
    # when read) is rolled back so every reader keeps the old values.
    old_ns = getattr(conf, "_mutable_ns", None)
    try:
        conf.mutate_config_files()
        # [compute] resource_provider_association_refresh is mutable.
        refresh = conf.compute.resource_provider_association_refresh
    except (cfg.Error, exception.ConfigError, ValueError) as err:
        problem = " ".join(str(err).split())
    else:
        client.refresh_interval = refresh
        LOG.info("SIGHUP: provider cache cleared, mutable options re-read")
        return True
    if hasattr(conf, "_mutable_ns"):
        conf._mutable_ns = old_ns
    # NOTE: logged outside the except block: oslo.log would repeat the
    # exception after the message.
    LOG.error("SIGHUP: configuration not reloaded, keeping the old values: "
              "%s", problem)
    return False


def run_periodic(client: preport.ReportClient, manager: PluginManager,
                 nodename: str) -> preport.PeriodicResult:
    """:func:`compute_plugins.compute.agent.run_periodic` (its old home)."""
    from compute_plugins.compute import agent
    return agent.run_periodic(client, manager, nodename)


def pinned_nodename(state: dict[str, Any], hostname: str) -> str:
    """:func:`compute_plugins.compute.agent.pinned_nodename` (its old home)."""
    from compute_plugins.compute import agent
    return agent.pinned_nodename(state, hostname)


def quiet_placement_logs(debug: bool) -> None:
    """The embedded Placement logs every request at INFO: keep that (and
    its start-up chatter) for --debug. So is waitress's "task queue depth"
    warning: ``placement serve`` on SQLite answers one request at a time by design,
    so requests queue whenever several agents call at once."""
    if debug:
        return
    import logging as std_logging

    for name in ("placement", "alembic", "keystoneauth",
                 "oslo_policy", "oslo_db", "routes"):
        std_logging.getLogger(name).setLevel(std_logging.WARNING)
    std_logging.getLogger("waitress.queue").setLevel(std_logging.ERROR)
