"""The conformance kit: check a resource plugin against the plugin contract.

For a plugin author's own test suite (pytest or any other)::

    from compute_plugins.testing import assert_conformant
    from my_plugin import MyPlugin

    def test_my_plugin_keeps_the_contract():
        assert_conformant(MyPlugin)

and on the command line, for installed plugins: ``compute-plugins
conformance [PLUGIN...]``.

The kit runs the plugin, with the plugins it runs after (``fit_after``, and
those providing a role it ``needs``), on
the demo's bundled hosts (:func:`~compute_plugins.testing.hosts.demo_hosts`,
each with its own configuration), with the requests the plugin offers
(:meth:`~compute_plugins.plugin.contract.ResourcePlugin.sample_requests`) at several
flavor sizes, on each host empty and filled with guests by fitting the
requests repeatedly (:mod:`compute_plugins.testing.runs`). Then it checks,
one line each (:mod:`compute_plugins.testing.checks`):

``discovery``
    the plugin discovers the hosts (at least one is usable);
``sample-requests``
    each sample request asks something of the plugin on some host;
``json-roundtrip``
    its requests, host states and assignments come back equal from JSON
    text (they cross processes: the scheduler, the host, the spec);
``fit-verify``
    every ``fit`` decision passes ``verify`` on the state it was made on,
    and ``verify`` refuses a decision where ``fit`` refuses the request;
``alternatives``
    ``alternatives`` start with ``fit``'s answer, are valid and distinct;
``double-booking``
    a decision verified on a state that already holds it is rejected (a
    plugin that counts capacity or holds nothing exclusive is said so);
``guest-xml``
    the guest fragments assemble into a domain that libvirt's domain
    schema accepts (``virt-xml-validate`` when installed; else SKIP);
``determinism``
    a second run on fresh plugins gives the same answers;
``exceptions``
    in all those calls, no hook raised what its contract does not allow
    (the framework contains it, but the host or request is lost);
``isolation``
    a plugin that raises in a hook gives one reason naming it, not an
    exception out of the framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from oslo_config import cfg

from compute_plugins.testing import _framework
from compute_plugins.testing.checks import CHECKS, run_checks
from compute_plugins.testing.domain import VIRT_XML_VALIDATE
from compute_plugins.testing.hosts import HostCase, demo_hosts, snapshot_host
from compute_plugins.testing.report import FAIL, PASS, SKIP, CheckResult, Report
from compute_plugins.testing.runs import PluginLike, Subject, build_world
from compute_plugins.testing.verdict import Context

__all__ = ["CHECKS", "FAIL", "PASS", "SKIP", "CheckResult", "HostCase", "Report",
           "assert_conformant", "check_installed", "check_plugin", "demo_hosts",
           "installed_plugins", "snapshot_host"]

AnyPlugin = _framework.AnyPlugin


def check_plugin(
    plugin: PluginLike,
    conf: Optional[cfg.ConfigOpts] = None,
    *,
    config_files: Sequence[str] = (),
    hosts: Optional[Sequence[HostCase]] = None,
    companions: Optional[Sequence[type[AnyPlugin]]] = None,
    checks: Optional[Sequence[str]] = None,
    xml_validator: Optional[str] = VIRT_XML_VALIDATE,
) -> Report:
    """Check ``plugin`` against the plugin contract (see the module doc).

    :param plugin: the plugin class (built for each host on the host's own
        configuration) or a ready instance (used on every host as it is,
        with its configuration).
    :param conf: with a class: one configuration for every host, instead of
        each host's own.
    :param config_files: with a class and no ``conf``: configuration files
        read after each host's own (the plugin's options).
    :param hosts: where to run it (default: :func:`demo_hosts`).
    :param companions: the classes of the plugins it runs after (default:
        the installed plugins its ``fit_after`` names and those providing a
        role it ``needs``).
    :param checks: the names of the checks to run (default: every one of
        :data:`CHECKS`, in that order).
    :param xml_validator: the ``virt-xml-validate`` command the
        ``guest-xml`` check runs (None: do not validate; a SKIP line).
    :returns: a result per check; :attr:`Report.ok` when none failed.
    :raises ValueError: an unknown check name.
    """
    unknown = sorted(set(checks or ()) - set(CHECKS))
    if unknown:
        raise ValueError("unknown check(s) %s; the checks are %s"
                         % (", ".join(unknown), ", ".join(CHECKS)))
    cases = tuple(demo_hosts() if hosts is None else hosts)
    with Subject(plugin, conf, config_files, companions) as subject:
        world = build_world(subject, cases)
        context = Context(subject, cases, xml_validator)
        return Report(subject.name, tuple(run_checks(world, context, checks)))


def assert_conformant(
    plugin: PluginLike,
    conf: Optional[cfg.ConfigOpts] = None,
    *,
    config_files: Sequence[str] = (),
    hosts: Optional[Sequence[HostCase]] = None,
    companions: Optional[Sequence[type[AnyPlugin]]] = None,
    checks: Optional[Sequence[str]] = None,
    xml_validator: Optional[str] = VIRT_XML_VALIDATE,
) -> Report:
    """:func:`check_plugin` (same parameters) for a test: raises
    AssertionError listing every check, with each failure's problems, when
    a check fails (pytest shows the message).

    :returns: the report when no check failed (skips included).
    """
    report = check_plugin(plugin, conf, config_files=config_files, hosts=hosts,
                          companions=companions, checks=checks,
                          xml_validator=xml_validator)
    if not report.ok:
        raise AssertionError("plugin %s breaks the plugin contract:\n%s"
                             % (report.plugin, report.text()))
    return report


def installed_plugins() -> list[str]:
    """The plugins installed in the ``compute_plugins.resources`` entry-point
    namespace, by name (none is imported)."""
    return _framework.installed_names()


def check_installed(
    name: str,
    *,
    config_files: Sequence[str] = (),
    hosts: Optional[Sequence[HostCase]] = None,
    checks: Optional[Sequence[str]] = None,
    xml_validator: Optional[str] = VIRT_XML_VALIDATE,
) -> Report:
    """:func:`check_plugin` of the installed plugin ``name`` (its class, as
    its entry point names it). A plugin that cannot be imported is a report
    of one failed ``load`` check.

    :raises LookupError: no plugin ``name`` is installed.
    """
    if name not in installed_plugins():
        raise LookupError("no plugin %r is installed" % name)
    try:
        cls = _framework.installed_class(name)
    except Exception as err:  # noqa: BLE001 - the plugin's, reported
        return Report(name, (CheckResult(name, "load", FAIL, "its entry point cannot "
                                         "be loaded: %s: %s" % (type(err).__name__, err)),))
    return check_plugin(cls, config_files=config_files, hosts=hosts, checks=checks,
                        xml_validator=xml_validator)
