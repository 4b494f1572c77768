"""The ``guest-xml`` check: the plugins' guest fragments assemble into a
domain that libvirt's domain schema accepts.

Assembly is the framework's (:mod:`compute_plugins.compute.guest`, run by
:mod:`compute_plugins.testing.runs` for each decision); the schema is
libvirt's, through ``virt-xml-validate`` when it is installed (Debian:
``libvirt-clients``, which runs ``xmllint`` of ``libxml2-utils``; the
schemas come with ``libvirt0``). Without it the check is a SKIP line that
says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Optional

from compute_plugins.testing import verdict as v
from compute_plugins.testing.report import CheckResult
from compute_plugins.testing.runs import World
from compute_plugins.testing.verdict import Context

__all__ = ["MAX_VALIDATED", "VIRT_XML_VALIDATE", "Validator", "guest_xml"]

#: The validator of libvirt domain XML the check runs.
VIRT_XML_VALIDATE = "virt-xml-validate"
#: The most distinct domains validated per plugin (each is a process).
MAX_VALIDATED = 64


class Validator:
    """libvirt's domain schema, through ``virt-xml-validate``.

    :param command: the command (a name on ``PATH`` or a path).
    """

    def __init__(self, command: str) -> None:
        self.command = command

    def problem(self, domain: str) -> Optional[str]:
        """None when ``domain`` validates, else the validator's complaint."""
        with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
            path = os.path.join(tmp, "domain.xml")
            with open(path, "w", encoding="utf-8") as out:
                out.write(domain)
            try:
                done = subprocess.run([self.command, path, "domain"], capture_output=True,
                                      text=True, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as err:
                return "%s could not run: %s" % (self.command, err)
        if done.returncode == 0:
            return None
        lines = [line.replace(path, "domain.xml")
                 for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return " | ".join(lines[:3]) or "exit status %d" % done.returncode


def guest_xml(world: World, context: Context) -> CheckResult:
    """The plugins' guest fragments assemble into a domain, valid against
    libvirt's domain schema when ``virt-xml-validate`` is installed."""
    check = "guest-xml"
    decided = v.decided(world)
    problems = ["%s: the guest domain cannot be assembled: %s"
                % (attempt.where, attempt.domain_error)
                for _, attempt in decided if attempt.domain_error]
    domains: dict[str, str] = {}
    for _, attempt in decided:
        if attempt.domain:
            domains.setdefault(attempt.domain, attempt.where)
    if not decided:
        return v.undecided(world, check)
    if problems:
        return v.result(world, check, problems, "")
    command = context.validator and shutil.which(context.validator)
    if not command:
        why = ("%s is not installed (Debian: libvirt-clients, libxml2-utils)"
               % context.validator if context.validator else "no validator given")
        return v.skip(world, check, "%s assembled; not validated against libvirt's "
                      "domain schema: %s" % (v.count(len(domains), "domain"), why))
    validator = Validator(command)
    chosen = list(domains.items())[:MAX_VALIDATED]
    for domain, where in chosen:
        complaint = validator.problem(domain)
        if complaint is not None:
            problems.append("%s: the guest domain is not valid against libvirt's "
                            "domain schema: %s" % (where, complaint))
    shown = (v.count(len(domains), "domain") if len(chosen) == len(domains)
             else "%d of %d distinct domains" % (len(chosen), len(domains)))
    return v.result(world, check, problems,
                    "%s valid against libvirt's domain schema (virt-xml-validate)" % shown)
