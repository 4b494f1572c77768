"""A plugin run on the kit's hosts: the cases every check looks at.

For each host the plugin under test is loaded with the plugins it runs
after (its ``fit_after``: a device plugin's NUMA affinity needs the ``numa``
plugin's decision), on the host's own configuration, and:

1. discovers the host (a host the plugin cannot discover is left out, and
   the checks say how many);
2. parses its sample requests (:meth:`ResourcePlugin.sample_requests`),
   each as given and at the kit's other flavor sizes (:data:`SIZES`),
   keeping those that ask something of the plugin;
3. fills the host: the largest request is fitted and its decision added to
   the assignments in force until it no longer fits, then the next one,
   up to :data:`MAX_GUESTS` guests; the empty host, the host with one guest,
   half filled and filled are the *situations* (states with assignments);
4. fits every request on every situation (an *attempt*), and where the
   plugin decides, asks its alternatives and assembles the guest domain.

Nothing here judges: the checks (:mod:`compute_plugins.testing.checks`)
do, and the determinism check builds it all twice and compares.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

from oslo_config import cfg

from compute_plugins.testing import _framework as fw
from compute_plugins.testing.hosts import HostCase
from compute_plugins.testing.recorder import Recorder

__all__ = ["MAX_ALTERNATIVES", "MAX_GUESTS", "SIZES", "Attempt", "HostRun",
           "Request", "Situation", "Subject", "World", "build_world",
           "transcript"]

#: Flavor sizes (vCPUs, memory MiB) each sample request is also tried at,
#: besides its own. A size the plugin's rules refuse for a sample (two
#: guest NUMA nodes of one vCPU) is left out.
SIZES = ((1, 1024), (2, 4096), (4, 8192), (8, 16384))
#: The most guests a host is filled with.
MAX_GUESTS = 32
#: The most alternatives asked of the plugin per attempt.
MAX_ALTERNATIVES = 16
#: The guest domain's name.
DOMAIN_NAME = "conformance"

PluginLike = Union[type[fw.AnyPlugin], fw.AnyPlugin]


class Subject:
    """The plugin under test, built for each host with the plugins it runs
    after; a context manager (its hooks are watched inside: see
    :class:`Recorder`).

    :param plugin: the plugin's class (built on each host's configuration)
        or a ready instance (used on every host as it is).
    :param conf: with a class: one configuration for every host instead of
        each host's own.
    :param config_files: with a class and no ``conf``: read after each
        host's own configuration files (options of the plugin's own).
    :param companions: the classes of the plugins it runs after; None:
        the installed plugins its ``fit_after`` names and those that
        provide a role it ``needs`` (:func:`_companions`).
    """

    def __init__(self, plugin: PluginLike, conf: Optional[cfg.ConfigOpts] = None,
                 config_files: Sequence[str] = (),
                 companions: Optional[Sequence[type[fw.AnyPlugin]]] = None) -> None:
        self.instance = None if isinstance(plugin, type) else plugin
        self.cls: type[fw.AnyPlugin] = plugin if isinstance(plugin, type) else type(plugin)
        self.name = self.cls.name
        self.conf = conf if self.instance is None else self.instance.conf
        self.config_files = tuple(config_files)
        if companions is None:
            companions = _companions(self.cls)
        self.companions = tuple(companions)
        self.recorder = Recorder()
        self._saved: Optional[dict[str, Any]] = None

    def __enter__(self) -> Subject:
        if self.instance is not None:
            self._saved = self.recorder.install(self.instance)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.instance is not None and self._saved is not None:
            self.recorder.uninstall(self.instance, self._saved)
            self._saved = None

    def load(self, case: HostCase) -> fw.Loaded:
        """Fresh plugins for ``case`` (the instance, when given, is reused)."""
        conf = (self.conf if self.conf is not None
                else fw.config(case.config_files + self.config_files))
        plugins = [cls(conf) for cls in self.companions]
        if self.instance is not None:
            plugins.append(self.instance)
        else:
            plugin = self.cls(conf)
            self.recorder.install(plugin)
            plugins.append(plugin)
        return fw.load(plugins, conf)


@dataclasses.dataclass(frozen=True)
class Request:
    """A request that asks something of the plugin under test.

    :param label: which sample, at which size (for messages).
    :param request_input: what it was parsed from.
    :param spec: every loaded plugin's typed request.
    """

    label: str
    request_input: fw.RequestInput
    spec: fw.RequestSpec

    @property
    def size(self) -> tuple[int, int, int]:
        flavor = self.spec.flavor
        return (flavor.vcpus, flavor.memory_mb, flavor.root_gb + flavor.ephemeral_gb)


@dataclasses.dataclass(frozen=True)
class Situation:
    """A host with guests on it.

    :param host: the host's name.
    :param label: ``empty``, ``1 guest``, ``full: 12 guests``...
    :param usage: plugin -> the assignments in force.
    :param states: plugin -> its host state under them.
    """

    host: str
    label: str
    usage: Mapping[str, tuple[fw.PluginAssignment, ...]]
    states: Mapping[str, Any]

    def holding(self, assignments: Mapping[str, fw.PluginAssignment]
                ) -> dict[str, list[fw.PluginAssignment]]:
        """The usage with ``assignments`` added."""
        usage = {name: list(items) for name, items in self.usage.items()}
        for name, assignment in assignments.items():
            usage.setdefault(name, []).append(assignment)
        return usage


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One request fitted on one situation.

    :param alternatives: the plugin's alternatives, when it decided.
    :param alternatives_error: the exception they raised, if any.
    :param domain: the assembled guest domain, when the plugin decided.
    :param domain_error: why it could not be assembled, if so.
    """

    situation: Situation
    request: Request
    result: fw.FitResult
    alternatives: tuple[fw.PluginAssignment, ...] = ()
    alternatives_error: str = ""
    domain: str = ""
    domain_error: str = ""

    @property
    def where(self) -> str:
        """``host numa, 1 guest, sample 2 at 4 vCPUs, 8192 MiB``."""
        return "host %s, %s, %s" % (self.situation.host, self.situation.label,
                                    self.request.label)


@dataclasses.dataclass(frozen=True)
class HostRun:
    """The plugin on one host.

    :param unusable: why the host was left out ("" when used).
    :param sample_problems: per sample (as given): why it asks nothing of
        the plugin here ("" when it does).
    :param fill_problems: decisions the host's state could not hold when
        added to the assignments in force (``fit`` gave what is taken).
    """

    case: HostCase
    loaded: fw.Loaded
    unusable: str = ""
    requests: tuple[Request, ...] = ()
    sample_problems: tuple[str, ...] = ()
    situations: tuple[Situation, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    fill_problems: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class World:
    """The plugin on every host.

    :param name: the plugin's name.
    :param samples: its sample requests.
    :param samples_error: what is wrong with ``sample_requests``, if anything
        (``raised ...``, or a sample that is no RequestInput).
    """

    name: str
    samples: tuple[fw.RequestInput, ...]
    samples_error: str
    runs: tuple[HostRun, ...]

    @property
    def used(self) -> tuple[HostRun, ...]:
        """The runs on hosts the plugin could be run on."""
        return tuple(run for run in self.runs if not run.unusable)

    def attempts(self) -> list[Attempt]:
        return [attempt for run in self.used for attempt in run.attempts]


def _failure(err: BaseException) -> str:
    return "%s: %s" % (type(err).__name__, err)


def _sized(sample: fw.RequestInput, vcpus: int, memory_mb: int) -> fw.RequestInput:
    flavor = dataclasses.replace(sample.flavor, vcpus=vcpus, memory_mb=memory_mb)
    return dataclasses.replace(sample, flavor=flavor)


def _variants(samples: Sequence[fw.RequestInput]
              ) -> list[tuple[int, str, fw.RequestInput]]:
    """``(sample index, label, input)``: each sample as given, then at the
    kit's sizes."""
    def size(vcpus: int, memory_mb: int) -> str:
        return "%d vCPU%s, %d MiB" % (vcpus, "" if vcpus == 1 else "s", memory_mb)

    out = []
    for index, sample in enumerate(samples):
        own = (sample.flavor.vcpus, sample.flavor.memory_mb)
        out.append((index, "sample %d (%s)" % (index, size(*own)), sample))
        for vcpus, memory_mb in SIZES:
            if (vcpus, memory_mb) != own:
                out.append((index, "sample %d at %s" % (index, size(vcpus, memory_mb)),
                            _sized(sample, vcpus, memory_mb)))
    return out


def _requests(loaded: fw.Loaded, name: str, samples: Sequence[fw.RequestInput]
              ) -> tuple[list[Request], list[str]]:
    """The requests that ask something of plugin ``name``, and per sample
    (as given) why it does not ("" when it does)."""
    requests: list[Request] = []
    sample_problems = [""] * len(samples)
    for index, label, request_input in _variants(samples):
        spec, problems = fw.build_spec(loaded, request_input)
        as_given = label.startswith("sample %d (" % index)
        if spec is None:
            if as_given:
                sample_problems[index] = "; ".join(str(p) for p in problems)
            continue
        if spec.requests.get(name) is None:
            if as_given:
                sample_problems[index] = "it asks nothing of plugin %s" % name
            continue
        requests.append(Request(label, request_input, spec))
    return requests, sample_problems


def _fill(loaded: fw.Loaded, host: str, nodename: str, requests: Sequence[Request],
          states: Mapping[str, Any]) -> tuple[list[Situation], list[str]]:
    """The situations of the host filled with ``requests``, largest first,
    and the decisions its state could not hold."""
    usage: dict[str, list[fw.PluginAssignment]] = {}
    filled = [Situation(host, "empty", {}, states)]
    problems: list[str] = []
    full = True
    for request in sorted(requests, key=lambda r: r.size, reverse=True):
        while len(filled) <= MAX_GUESTS:
            current = filled[-1]
            result = fw.fit(loaded, current.states, request.spec)
            if not result.fits:
                break
            usage = current.holding(result.assignments)
            states, broken = fw.host_states(loaded, nodename, usage)
            if broken:
                problems.extend(
                    "host %s, %s, %s: fit's decision cannot be added to the "
                    "assignments in force (fit chose what is taken, or what the "
                    "host does not have): %s: %s"
                    % (host, current.label, request.label, r.plugin, r.reason)
                    for r in broken)
                return _chosen(filled, full=False), problems
            guests = len(filled)
            filled.append(Situation(host, "%d guest%s" % (guests, "" if guests == 1 else "s"),
                                    {n: tuple(a) for n, a in usage.items()}, states))
        else:
            full = False
    return _chosen(filled, full), problems


def _chosen(filled: list[Situation], full: bool) -> list[Situation]:
    """The empty host, one guest, half and all of them."""
    last = len(filled) - 1
    picked = [filled[i] for i in sorted({0, min(1, last), last // 2, last})]
    if full and last > 0:
        picked[-1] = dataclasses.replace(picked[-1], label="full: " + picked[-1].label)
    return picked


def _attempt(loaded: fw.Loaded, name: str, situation: Situation,
             request: Request) -> Attempt:
    result = fw.fit(loaded, situation.states, request.spec)
    attempt = Attempt(situation, request, result)
    if name not in result.assignments:
        return attempt
    earlier = loaded.earlier_than(name, result.assignments)
    try:
        offered = fw.alternatives(loaded, name, situation.states.get(name),
                                  request.spec, earlier, MAX_ALTERNATIVES)
        attempt = dataclasses.replace(attempt, alternatives=tuple(offered))
    except Exception as err:  # noqa: BLE001 - the plugin's bug, reported
        attempt = dataclasses.replace(attempt, alternatives_error=_failure(err))
    try:
        domain = fw.domain_xml(loaded, request.spec, result.assignments, DOMAIN_NAME)
        attempt = dataclasses.replace(attempt, domain=domain)
    except fw.GuestConfigError as err:
        attempt = dataclasses.replace(attempt, domain_error=str(err))
    except Exception as err:  # noqa: BLE001 - the plugin's bug, reported
        attempt = dataclasses.replace(attempt, domain_error=_failure(err))
    return attempt


def _run_host(subject: Subject, case: HostCase,
              samples: Sequence[fw.RequestInput]) -> HostRun:
    loaded = subject.load(case)
    run = HostRun(case, loaded)
    failures = fw.discover(loaded, case.host)
    if failures:
        return dataclasses.replace(run, unusable="; ".join(
            "plugin %s cannot discover it: %s" % item for item in sorted(failures.items())))
    nodename = case.host.hostname
    states, broken = fw.host_states(loaded, nodename, {})
    if broken:
        return dataclasses.replace(run, unusable="; ".join(
            "plugin %s: %s" % (r.plugin, r.reason) for r in broken))
    requests, sample_problems = _requests(loaded, subject.name, samples)
    situations, fill_problems = _fill(loaded, case.name, nodename, requests, states)
    attempts = tuple(_attempt(loaded, subject.name, situation, request)
                     for situation in situations for request in requests)
    return dataclasses.replace(
        run, requests=tuple(requests), sample_problems=tuple(sample_problems),
        situations=tuple(situations), attempts=attempts,
        fill_problems=tuple(fill_problems))


def build_world(subject: Subject, hosts: Sequence[HostCase]) -> World:
    """The plugin run on every host (see the module doc)."""
    samples: tuple[fw.RequestInput, ...] = ()
    samples_error = ""
    loaded = subject.load(hosts[0]) if hosts else None
    if loaded is not None:
        try:
            samples = fw.samples(loaded.plugins[subject.name])
        except Exception as err:  # noqa: BLE001 - the plugin's bug, reported
            samples_error = "raised " + _failure(err)
        wrong = [(index, sample) for index, sample in enumerate(samples)
                 if not isinstance(sample, fw.RequestInput)]
        if wrong:
            index, sample = wrong[0]
            samples, samples_error = (), "gave a %s as sample %d, not a RequestInput" % (
                type(sample).__name__, index)
    runs = tuple(_run_host(subject, case, samples) for case in hosts)
    return World(subject.name, samples, samples_error, runs)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def transcript(world: World,
               doc: Callable[[Any], Any] = fw.value_doc) -> list[tuple[str, str]]:
    """Everything the plugin answered, as ``(where, JSON)`` pairs in a fixed
    order: two runs of a deterministic plugin give equal transcripts."""
    out = [("samples", _json([doc(s) for s in world.samples])),
           ("sample_requests", world.samples_error)]
    for run in world.runs:
        host = "host %s" % run.case.name
        out.append((host, run.unusable))
        out.extend(("%s, %s" % (host, r.label), _json(fw.spec_doc(r.spec)))
                   for r in run.requests)
        out.extend(("%s, %s: states" % (host, s.label),
                    _json({n: doc(v) for n, v in s.states.items()}))
                   for s in run.situations)
        for attempt in run.attempts:
            out.append((attempt.where, _json({
                "assignments": {n: doc(a) for n, a in attempt.result.assignments.items()},
                "rejections": [doc(r) for r in attempt.result.rejections],
                "alternatives": [doc(a) for a in attempt.alternatives],
                "alternatives_error": attempt.alternatives_error,
                "domain": attempt.domain, "domain_error": attempt.domain_error})))
    return out


def _companions(cls: type[fw.AnyPlugin]) -> list[type[fw.AnyPlugin]]:
    """The installed plugins ``cls`` runs after: those its ``fit_after``
    names, then those that provide a role it ``needs`` (the topology of a
    device plugin's NUMA affinity), each once, by name."""
    found: dict[str, type[fw.AnyPlugin]] = {}
    installed = [name for name in fw.installed_names() if name != cls.name]
    for name in installed:
        if name in cls.fit_after:
            found[name] = fw.installed_class(name)
    if cls.needs:
        for name in installed:
            if name not in found:
                try:
                    other = fw.installed_class(name)
                except Exception:  # noqa: BLE001 - another plugin's import bug
                    continue  # NOTE: not this plugin's check to fail
                if set(other.provides) & set(cls.needs):
                    found[name] = other
    return [found[name] for name in sorted(found)]

