"""A soak of a small cloud run as an operator runs it, with faults at
seeded random points (issue 20): nothing given twice, nothing leaked,
nothing stuck.

Every part is a real process on the loopback: ``compute-plugins placement
serve`` (a SQLite file), one ``compute-plugins report`` agent per host (a
copy of the ``numa4`` snapshot: 4 cells of 4 dedicated CPUs, its own state
directory), and a host-state store (a SQLite file) that they all share.
For ``duration`` seconds a :class:`random.Random` seeded with ``seed``
picks what happens next:

- ``schedule`` of a pinned flavor (2 or 4 CPUs on one guest node, or 2 on
  each of two), sometimes killed (``SIGKILL``) at a random moment, and
  sometimes run again for a killed one's consumer (``schedule --consumer``);
- ``release`` of a consumer seen before (placed or not, maybe still being
  scheduled), sometimes killed;
- an agent killed (``SIGKILL``) or stopped (``SIGTERM``), and started
  again a moment later on the same state directory;
- Placement killed (``SIGKILL``) and served again on its port and database
  a moment later;
- a store outage: another process holds SQLite's write lock for a while
  (every write of the agents and schedulers waits ``[host_state]
  lock_timeout`` and fails as the store being unavailable; reads go on).

Then the faults stop, everything is started again and left to settle
(every decision claimed, rejected or released), ``compute-plugins audit
--fix --older-than 0`` repairs what the killed processes left in doubt
(a scheduler killed between its ``PUT /allocations`` and its decision
leaves an orphan allocation only the audit can free: an orphan of a
consumer whose commands no kill or fault touched, or any other finding, is
a problem), and :meth:`Soak.check` asserts, from the files and Placement
directly:

- a second ``audit --older-than 0`` finds nothing (exit 0);
- no decision is left pending or releasing;
- each host's Placement usages equal what its claims ledger's assignments
  take, provider by provider; no allocation on a host's tree is held by no
  ledger (no orphan); each claimed decision in the store is in its host's
  ledger and the other way round;
- no host CPU is pinned by two claims, no consumer is claimed on two hosts;
- a consumer whose ``schedule`` placed it and that was never released is
  held; one released (exit 0) and not scheduled again is held nowhere;
- no command ran past its own timeout by more than :data:`HANG_GRACE`, and
  no agent exited by itself.

Run in the suite (tests/functional/test_soak.py: a short run of a fixed
seed) and as ``python -m bench soak --duration S --seed N`` (or ``make
soak``). A failure names the seed; the same seed replays the same choices
(the timing of real processes still differs from run to run).
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from compute_plugins.compute import ledger as ledgers
from compute_plugins.hoststate import DecisionStatus, HostStateStore
from compute_plugins.placement import client as pclient
from tests.functional.compute.test_agent import NUMA4, SMALL, make_conf
from tests.functional.placement.conftest import CLI, ServedPlacement, cli_env, free_port
from tests.functional.scheduler.cloud import expected_allocation

#: The flavors scheduled, all pinned (a CPU given twice is visible).
FLAVORS = {
    "small": SMALL,
    "pinned": {"name": "pinned", "vcpus": 4, "memory_mb": 1024,
               "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1",
                               "hw:mem_page_size": "2048"}},
    "two-nodes": {"name": "two-nodes", "vcpus": 4, "memory_mb": 1024,
                  "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
                                  "hw:mem_page_size": "2048"}},
}

#: Placement's huge page classes (the assignments count them in MEMORY_MB).
PAGES = re.compile(r"CUSTOM_MEMORY_PAGE_(\d+)KB")
#: Seconds a command may run past its own timeout (a loaded machine
#: starts Python slowly) before it counts as hung.
HANG_GRACE = 60.0
#: ``schedule --timeout`` and ``release --timeout``.
ANSWER_TIMEOUT = 8.0
#: Seconds the end waits for every decision to be claimed, rejected or
#: released once every agent runs again.
SETTLE_TIMEOUT = 60.0

AGENT_CONF = """[compute_plugins]
enabled_plugins = numa
state_dir = {state_dir}
[compute]
cpu_dedicated_set = 0-15
reserved_host_memory_mb = 0
claim_poll_interval = 0.1
agent_lease_duration = 6
placement_audit_interval = 2
[host_state]
connection = {store}
lock_timeout = 1
"""

CLIENT_CONF = """[compute_plugins]
enabled_plugins = numa
state_dir = {state_dir}
[host_state]
connection = {store}
lock_timeout = 1
[scheduler]
answer_timeout = {timeout}
"""

#: The weights of the work's choices.
WORK = {"schedule": 6, "release": 3, "rerun": 1}
#: The faults, each every so many seconds on average (at least once).
FAULTS = {"kill-agent": 30.0, "restart-agent": 60.0, "kill-placement": 90.0,
          "store-outage": 40.0}
#: The chance that a ``schedule`` (``release``) is killed, at a moment
#: drawn from :data:`KILL_AFTER` seconds after its start.
KILL_SCHEDULE, KILL_RELEASE = 0.3, 0.1
KILL_AFTER = (0.5, 6.0)
#: The last lines of an agent that could not start because Placement or
#: the store was down at that moment: it exits 1 at once (a supervisor
#: restarts it); the soak starts it again a moment later.
START_REFUSALS = ("cannot reach Placement", "is unavailable: database is locked")


@dataclasses.dataclass
class Command:
    """One ``schedule`` or ``release`` process.

    :param kind: ``schedule`` or ``release``.
    :param consumer: its consumer.
    :param started: monotonic time it was started.
    :param deadline: monotonic time after which it is hung.
    :param ended: monotonic time it was seen ended (None: running).
    :param returncode: its exit status (negative: killed by that signal).
    :param killed: the soak killed it.
    """

    kind: str
    consumer: str
    proc: subprocess.Popen
    out: Path
    started: float
    deadline: float
    ended: Optional[float] = None
    returncode: Optional[int] = None
    killed: bool = False

    def text(self) -> str:
        return self.out.read_text(errors="replace")


class Agent:
    """``compute-plugins report`` for one host, restartable."""

    def __init__(self, directory: Path, name: str, store: str,
                 placement: Callable[[], str]) -> None:
        self.name = name
        self.snapshot = directory / "hosts" / name
        shutil.copytree(NUMA4, self.snapshot)
        (self.snapshot / "host.json").write_text(json.dumps({"hostname": name}))
        self.state_dir = directory / "state" / name
        self.conf = directory / ("%s.conf" % name)
        self.conf.write_text(AGENT_CONF.format(state_dir=self.state_dir, store=store))
        self.log = directory / ("%s.log" % name)
        self._placement = placement
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0

    def start(self) -> None:
        if self.proc is not None:
            return  # started again meanwhile
        with open(self.log, "a") as log:
            log.write("== start %d\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen(
                CLI + ["--config-file", str(self.conf), "--host-snapshot",
                       str(self.snapshot), "--placement-url", self._placement(),
                       "--format", "json", "report", "--interval", "2"],
                stdout=log, stderr=subprocess.STDOUT,
                env=cli_env(PYTHONUNBUFFERED="1"))
        self.starts += 1

    def stop(self, sig: int) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def exited(self) -> Optional[int]:
        """The exit status of an agent that stopped by itself (None: runs
        or not started)."""
        return None if self.proc is None else self.proc.poll()

    def reported(self) -> bool:
        """Whether the agent's last start printed a periodic's result (it
        ran, rather than refused to start)."""
        text = self.log.read_text(errors="replace")
        return any(line.startswith("{") for line in
                   text[text.rindex("== start"):].splitlines())

    def tail(self, lines: int = 3) -> str:
        return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class StoreOutage:
    """The store's SQLite write lock held by another process for a while:
    every writer waits ``lock_timeout`` and fails as the store being
    unavailable, readers go on (WAL)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread: Optional[threading.Thread] = None

    @property
    def on(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, seconds: float) -> None:
        def hold() -> None:
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                time.sleep(seconds)
                conn.execute("ROLLBACK")
            finally:
                conn.close()

        self._thread = threading.Thread(target=hold, daemon=True, name="store-outage")
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()


@dataclasses.dataclass
class Result:
    """What a soak did and found.

    :param seed: its seed.
    :param counts: how many times each step ran.
    :param outcomes: ``schedule``/``release`` exit statuses, counted.
    :param fixed: the findings ``audit --fix`` repaired at the end, by kind.
    :param problems: what is wrong (empty: nothing).
    """

    seed: int
    duration: float
    counts: dict[str, int]
    outcomes: dict[str, int]
    fixed: dict[str, int]
    problems: list[str]
    directory: str

    def summary(self) -> str:
        return ("soak seed %d, %.0f s: steps %s; exits %s; audit --fix repaired %s; "
                "%s" % (self.seed, self.duration, _counted(self.counts),
                        _counted(self.outcomes), _counted(self.fixed) or "nothing",
                        "%d problem(s)" % len(self.problems) if self.problems
                        else "no problem"))


def _counted(counts: dict[str, int]) -> str:
    return ", ".join("%s %d" % (k, v) for k, v in sorted(counts.items()))


class Soak:
    """The cloud and the random schedule of faults.

    :param directory: everything goes there (logs, databases, state).
    :param seed: the random schedule's seed.
    :param hosts: how many hosts (agents).
    :param clients: at most this many ``schedule``/``release`` processes
        at a time.
    :param say: progress lines go there (None: nowhere).
    """

    def __init__(self, directory: Path, seed: int, hosts: int = 2, clients: int = 3,
                 say: Optional[Callable[[str], None]] = None) -> None:
        self.directory = directory
        self.seed = seed
        self.random = random.Random(seed)
        self.clients = clients
        self._say = say or (lambda line: None)
        self.began = time.monotonic()
        self.store_path = directory / "host_state.sqlite"
        self.store_url = "sqlite:///%s" % self.store_path
        self.placement = ServedPlacement(str(directory / "placement.sqlite"), free_port())
        self.agents = [Agent(directory, "soak-%d" % i, self.store_url,
                             lambda: self.placement.url) for i in range(hosts)]
        self.client_conf = directory / "client.conf"
        self.client_conf.write_text(CLIENT_CONF.format(
            state_dir=directory / "client", store=self.store_url, timeout=ANSWER_TIMEOUT))
        for name, flavor in FLAVORS.items():
            (directory / ("%s.json" % name)).write_text(json.dumps(flavor))
        self.outage = StoreOutage(self.store_path)
        self.commands: list[Command] = []
        #: consumer -> the flavor it was scheduled with.
        self.flavors: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.problems: list[str] = []
        self.restarts: list[tuple[float, Callable[[], None]]] = []
        #: When each fault lasted (monotonic start, end; end None: until
        #: the end of the faults).
        self.windows: list[list[Optional[float]]] = []

    def say(self, line: str) -> None:
        self._say("%5.1f s %s" % (time.monotonic() - self.began, line))

    # -- the parts ------------------------------------------------------------

    def cli(self, *args: str) -> list[str]:
        return CLI + ["--config-file", str(self.client_conf), "--placement-url",
                      self.placement.url, *args]

    def start(self) -> None:
        self.placement.start()
        for agent in self.agents:
            agent.start()
        # NOTE: schedulers only see hosts once their agents published.
        deadline = time.monotonic() + 120
        while True:
            try:
                with HostStateStore(self.store_url) as store:
                    published = set(store.generations())
            except Exception:  # noqa: BLE001 - not created yet
                published = set()
            if published >= {a.name for a in self.agents}:
                return
            for agent in self.agents:
                if agent.exited() is not None:
                    raise RuntimeError("agent %s exited %s at start: %s"
                                       % (agent.name, agent.exited(), agent.tail()))
            if time.monotonic() > deadline:
                raise RuntimeError("the agents did not publish within 120 s")
            time.sleep(0.2)

    def close(self) -> None:
        """Stop every process (the soak's own, by their pids)."""
        for command in self.commands:
            if command.proc.poll() is None:
                command.proc.kill()
                command.proc.wait()
        for agent in self.agents:
            agent.stop(signal.SIGTERM)
        self.outage.wait()
        self.placement.stop()

    def spawn(self, kind: str, consumer: str, args: list[str], timeout: float) -> Command:
        out = self.directory / "out" / ("%04d-%s-%s.txt" % (
            len(self.commands), kind, consumer[:8]))
        out.parent.mkdir(exist_ok=True)
        with open(out, "w") as f:
            proc = subprocess.Popen(self.cli(*args), stdout=f, stderr=subprocess.STDOUT,
                                    env=cli_env())
        now = time.monotonic()
        command = Command(kind, consumer, proc, out, now, now + timeout + HANG_GRACE)
        self.commands.append(command)
        return command

    def schedule(self, consumer: str, flavor: str) -> Command:
        self.flavors[consumer] = flavor
        return self.spawn("schedule", consumer, [
            "--format", "json", "schedule", "--flavor",
            str(self.directory / ("%s.json" % flavor)), "--consumer", consumer,
            "--timeout", str(ANSWER_TIMEOUT)], ANSWER_TIMEOUT * 4)

    def release(self, consumer: str) -> Command:
        return self.spawn("release", consumer, [
            "release", "--consumer", consumer, "--timeout", str(ANSWER_TIMEOUT)],
            ANSWER_TIMEOUT)

    def running(self) -> list[Command]:
        now = time.monotonic()
        live = []
        for command in self.commands:
            if command.ended is not None:
                continue
            code = command.proc.poll()
            if code is not None:
                command.ended, command.returncode = now, code
            elif now > command.deadline:
                command.proc.kill()
                command.proc.wait()
                command.ended, command.returncode, command.killed = now, -9, True
                self.problems.append("hang: %s --consumer %s ran %.0f s (past its timeout "
                                     "and %.0f s): %s" % (
                                         command.kind, command.consumer,
                                         now - command.started, HANG_GRACE,
                                         command.text()[-300:].replace("\n", " | ")))
            else:
                live.append(command)
        return live

    def later(self, delay: float, action: Callable[[], None]) -> None:
        self.restarts.append((time.monotonic() + delay, action))

    def due(self, everything: bool = False) -> None:
        now = time.monotonic()
        keep = []
        for at, action in self.restarts:
            if everything or at <= now:
                action()
            else:
                keep.append((at, action))
        self.restarts = keep

    # -- the steps --------------------------------------------------------------

    def step(self) -> None:
        """The next piece of work: a ``schedule``, a ``release`` or a
        killed schedule's re-run (none while :attr:`clients` run)."""
        r = self.random
        kind = r.choices(list(WORK), weights=list(WORK.values()))[0]
        if len([c for c in self.running() if c.kind in ("schedule", "release")]) >= (
                self.clients):
            return
        # NOTE: a release of what may be held (placed, being placed or
        # killed on the way), now and then of anything seen.
        held = sorted({c.consumer for c in self.commands if c.kind == "schedule"
                       and (c.ended is None or c.killed or c.returncode == 0)})
        seen = held if held and r.random() < 0.8 else sorted(self.flavors)
        killed = sorted({c.consumer for c in self.commands
                         if c.kind == "schedule" and c.killed})
        if kind == "release" and seen:
            self.maybe_kill(self.release(r.choice(seen)), KILL_RELEASE)
        elif kind == "rerun" and killed:
            consumer = r.choice(killed)
            self.maybe_kill(self.schedule(consumer, self.flavors[consumer]),
                            KILL_SCHEDULE)
        else:
            kind = "schedule"
            self.maybe_kill(self.schedule(
                str(uuid.UUID(int=r.getrandbits(128), version=4)),
                r.choice(sorted(FLAVORS))), KILL_SCHEDULE)
        self.counted(kind)

    def counted(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def faults(self, duration: float) -> list[tuple[float, str]]:
        """When each fault happens (seconds from the start of the work),
        drawn once: each kind of :data:`FAULTS` at least once."""
        timeline = []
        for kind, every in FAULTS.items():
            for _ in range(max(1, round(duration / every))):
                timeline.append((self.random.uniform(0.1, 0.9) * duration, kind))
        return sorted(timeline)

    def fault(self, kind: str) -> bool:
        """Make ``kind`` happen (False: not now, the part is down)."""
        r = self.random
        if kind in ("kill-agent", "restart-agent"):
            running = [a for a in self.agents if a.proc is not None]
            if not running:
                return False
            agent = r.choice(running)
            agent.stop(signal.SIGKILL if kind == "kill-agent" else signal.SIGTERM)
            self.later(r.uniform(0.0, 3.0), self.ended_by(agent.start))
        elif kind == "kill-placement":
            if self.placement.proc is None:
                return False
            self.placement.proc.kill()
            self.placement.proc.wait()
            self.placement.proc = None
            self.later(r.uniform(0.2, 2.0), self.ended_by(self.placement.start))
        elif kind == "store-outage":
            if self.outage.on:
                return False
            seconds = r.uniform(0.5, 3.0)
            self.outage.start(seconds)
            now = time.monotonic()
            self.windows.append([now, now + seconds + 1.0])
        self.counted(kind)
        return True

    def ended_by(self, restart: Callable[[], None]) -> Callable[[], None]:
        """``restart``, which ends the fault starting now."""
        window: list[Optional[float]] = [time.monotonic(), None]
        self.windows.append(window)

        def restarted() -> None:
            restart()
            # NOTE: an agent's first periodic, Placement's first request
            # come a moment after the process started.
            window[1] = time.monotonic() + 5.0

        return restarted

    def in_doubt(self, commands: list[Command], end: float) -> bool:
        """Whether a kill or a fault touched ``commands``: one killed, or
        one running (a release not answered in time: until ``end``) while
        a fault lasted."""
        for c in commands:
            if c.killed:
                return True
            # NOTE: a release not answered in time goes on in its agent.
            last = end if c.ended is None or (
                c.kind == "release" and c.returncode != 0) else c.ended
            if any(w[0] is not None and w[0] <= last and (w[1] is None or w[1] >= c.started)
                   for w in self.windows):
                return True
        return False

    def maybe_kill(self, command: Command, chance: float) -> None:
        """Kill ``command`` (SIGKILL) at a random moment, with ``chance``."""
        if self.random.random() >= chance:
            return

        def kill() -> None:
            if command.proc.poll() is None:
                command.proc.kill()
                command.killed = True
                self.counted("kill-" + command.kind)

        self.later(self.random.uniform(*KILL_AFTER), kill)

    def run(self, duration: float) -> None:
        """The faults for ``duration`` seconds, then everything back and
        settled."""
        began = time.monotonic()
        timeline = self.faults(duration)
        # NOTE: a fault that cannot happen now (Placement down already) is
        # put off a moment, past the duration if need be: each happens.
        while time.monotonic() < began + duration or timeline:
            self.due()
            while timeline and timeline[0][0] <= time.monotonic() - began:
                kind = timeline.pop(0)[1]
                if not self.fault(kind):
                    timeline.append((time.monotonic() - began + 2.0, kind))
                    timeline.sort()
            self.step()
            self.agents_alive()
            time.sleep(self.random.uniform(0.05, 0.5))
        self.say("faults over: %s" % _counted(self.counts))
        while self.running():
            self.due()
            time.sleep(0.2)
        self.due(everything=True)
        self.running()
        self.outage.wait()
        self.agents_alive()
        self.say("commands ended: %s" % _counted(self.outcomes()))
        self.settle()
        self.say("settled")

    def agents_alive(self) -> None:
        for agent in self.agents:
            code = agent.exited()
            if code is None:
                continue
            agent.proc = None
            last = agent.tail(1)
            if code == 1 and not agent.reported() and any(
                    refusal in last for refusal in START_REFUSALS):
                self.counted("agent-start-refused")
                self.later(1.0, agent.start)
            else:
                self.problems.append("agent %s exited %d by itself: %s"
                                     % (agent.name, code, agent.tail()))
                agent.start()

    def settle(self) -> None:
        """Until no decision is pending or releasing (every agent runs)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            left = self.unsettled()
            if not left:
                return
            if time.monotonic() > deadline:
                self.problems.append("stuck: after %.0f s with every agent running, "
                                     "decisions are still %s" % (SETTLE_TIMEOUT,
                                                                 ", ".join(left)))
                return
            self.due()
            self.agents_alive()
            time.sleep(0.5)

    def unsettled(self) -> list[str]:
        left = []
        with HostStateStore(self.store_url) as store:
            for agent in self.agents:
                for status in (DecisionStatus.PENDING, DecisionStatus.RELEASING):
                    left += ["%s %d (%s on %s)" % (status.value, d.id, d.consumer,
                                                    agent.name)
                             for d in store.list_decisions(agent.name, status)]
        return left

    # -- the end ------------------------------------------------------------------

    def audit(self, *args: str) -> tuple[int, str]:
        proc = subprocess.run(self.cli("--format", "json", "audit", "--older-than", "0",
                                       *args),
                              capture_output=True, text=True, timeout=120, env=cli_env())
        return proc.returncode, proc.stdout + proc.stderr

    def check(self) -> dict[str, int]:
        """The end's checks (problems added to :attr:`problems`); the
        findings ``audit --fix`` repaired, by kind."""
        fixed: dict[str, int] = {}
        end = time.monotonic()
        code, out = self.audit("--fix")
        try:
            for finding in json.loads(out)["findings"]:
                key = "%s %s" % (finding["kind"], finding.get("action", ""))
                fixed[key] = fixed.get(key, 0) + 1
                # NOTE: only an orphan allocation is in-doubt work a kill
                # or a fault leaves (a scheduler killed between its PUT
                # and its decision, Placement or the store down while it
                # cleaned up); one whose commands no fault touched is a
                # leak, a claim without its allocation or with another one
                # is given twice.
                if finding["kind"] != "orphan-allocation" or not self.in_doubt(
                        [c for c in self.commands if c.consumer == finding["consumer"]],
                        end):
                    self.problems.append("audit --fix found %s" % json.dumps(finding))
        except (ValueError, KeyError):
            self.problems.append("audit --fix: exit %d: %s" % (code, out[-500:]))
        self.say("audit --fix: %s" % (_counted(fixed) or "nothing"))
        code, out = self.audit()
        if code != 0:
            self.problems.append("audit after the fix: exit %d: %s" % (code, out[-800:]))
        self.check_ledgers()
        return fixed

    def check_ledgers(self) -> None:
        conf = make_conf(self.directory / "checker")
        from compute_plugins.runtime.manager import PluginManager

        plugins = PluginManager(conf).plugins
        client = pclient.PlacementClient.for_url(self.placement.url)
        held: dict[str, str] = {}
        with HostStateStore(self.store_url) as store:
            for agent in self.agents:
                ledger = ledgers.Ledger.load(str(agent.state_dir), agent.name, plugins)
                entries = ledger.entries()
                pinned: dict[int, str] = {}
                want: dict[str, dict[str, int]] = {}
                for consumer, entry in entries.items():
                    if consumer in held:
                        self.problems.append("double: consumer %s claimed on %s and %s"
                                             % (consumer, held[consumer], agent.name))
                    held[consumer] = agent.name
                    decision = entry.spec.decision
                    assert decision is not None  # a claim answers a decision
                    for part in getattr(decision.assignments.get("numa"), "cells", ()):
                        for cpu in part.pinning.values():
                            if cpu in pinned:
                                self.problems.append(
                                    "double: CPU %d of %s pinned by %s and %s"
                                    % (cpu, agent.name, pinned[cpu], consumer))
                            pinned[cpu] = consumer
                    for rp, res in expected_allocation(decision).items():
                        for rc, n in res.items():
                            want.setdefault(rp, {})
                            want[rp][rc] = want[rp].get(rc, 0) + n
                    active = store.active_decision(consumer)
                    if (active is None or active.status != DecisionStatus.CLAIMED
                            or active.host != agent.name
                            or active.id != entry.decision_id):
                        self.problems.append(
                            "ledger/store: %s holds %s (decision %d), the store has %s"
                            % (agent.name, consumer, entry.decision_id, active))
                for d in store.list_decisions(agent.name, DecisionStatus.CLAIMED):
                    if d.consumer not in entries:
                        self.problems.append("ledger/store: decision %d of %s claimed on "
                                             "%s, not in its ledger"
                                             % (d.id, d.consumer, agent.name))
                self.check_placement(client, agent.name, set(entries), want)
        self.check_outcomes(held)

    def check_placement(self, client: pclient.PlacementClient, host: str,
                        claims: set[str], want: dict[str, dict[str, int]]) -> None:
        (root,) = client.get("/resource_providers?name=%s" % host)["resource_providers"]
        tree = client.get("/resource_providers?in_tree=%s" % root["uuid"])
        have: dict[str, dict[str, int]] = {}
        for rp in tree["resource_providers"]:
            used: dict[str, int] = {}
            for rc, n in client.get("/resource_providers/%s/usages"
                                    % rp["uuid"])["usages"].items():
                page = PAGES.fullmatch(rc)
                if page:  # NOTE: the ledger's assignments count MiB
                    rc, n = "MEMORY_MB", n * int(page.group(1)) // 1024
                if n:
                    used[rc] = used.get(rc, 0) + n
            if used:
                have[rp["uuid"]] = used
            allocations = client.get("/resource_providers/%s/allocations"
                                     % rp["uuid"])["allocations"]
            for consumer in sorted(set(allocations) - claims):
                self.problems.append("orphan: %s has an allocation on %s (%s) that no "
                                     "claim holds" % (consumer, host, rp["name"]))
        if have != want:
            self.problems.append("placement/ledger: %s's usages %s, its ledger's claims "
                                 "take %s" % (host, have, want))

    def check_outcomes(self, held: dict[str, str]) -> None:
        by_consumer: dict[str, list[Command]] = {}
        for command in self.commands:
            by_consumer.setdefault(command.consumer, []).append(command)
        for consumer, commands in sorted(by_consumer.items()):
            releases = [c for c in commands if c.kind == "release"]
            placed = [c for c in commands if c.kind == "schedule" and c.returncode == 0]
            if placed and not releases and consumer not in held:
                self.problems.append("lost: %s was placed (%s) and never released, "
                                     "no ledger holds it" % (consumer, placed[-1].out))
            # NOTE: only a release after every schedule of the consumer
            # ended: one that ran before a schedule's decision existed
            # rightly found nothing in force.
            freed = [r for r in releases if r.returncode == 0 and all(
                c.ended is not None and c.ended < r.started
                for c in commands if c.kind == "schedule")]
            if freed and consumer in held:
                self.problems.append("leak: %s was released (%s) and is still held by %s"
                                     % (consumer, freed[-1].out, held[consumer]))

    def outcomes(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for c in self.commands:
            key = "%s %s" % (c.kind, "killed" if c.killed else c.returncode)
            counted[key] = counted.get(key, 0) + 1
        return counted


def soak(directory: Path, seed: int, duration: float, hosts: int = 2, clients: int = 3,
         say: Optional[Callable[[str], None]] = None) -> Result:
    """Run a soak in ``directory`` (kept: logs and databases to look at).

    :returns: what it did and found; :attr:`Result.problems` empty when
        nothing was wrong.
    """
    directory.mkdir(parents=True, exist_ok=True)
    run = Soak(directory, seed, hosts, clients, say)
    began = time.monotonic()
    try:
        run.start()
        run.run(duration)
        fixed = run.check()
    finally:
        run.close()
    return Result(seed, time.monotonic() - began, run.counts, run.outcomes(), fixed,
                  run.problems, str(directory))

