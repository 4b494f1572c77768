"""Kernel facts nova reads from sysfs: the SEV flavours ``kvm_amd`` enables.

nova's ``Host._kernel_supports_amd_sev(model)`` reads
``/sys/module/kvm_amd/parameters/<sev|sev_es|sev_snp>`` (a missing file:
not supported; the content as a boolean, ``Y``/``N`` or ``1``/``0``).
"""

from __future__ import annotations

import os

KVM_AMD_PARAMETERS = "/sys/module/kvm_amd/parameters"
#: nova's model -> the parameter file.
SEV_FLAVOURS = {"sev": "sev", "sev-es": "sev_es", "sev-snp": "sev_snp"}


def kvm_amd_sev(parameters: str = KVM_AMD_PARAMETERS) -> frozenset[str]:
    """The SEV flavours enabled under ``parameters`` (none when ``kvm_amd``
    is not loaded, e.g. an Intel host)."""
    enabled = set()
    for flavour, name in SEV_FLAVOURS.items():
        try:
            with open(os.path.join(parameters, name), encoding="ascii") as handle:
                content = handle.read(64)
        except (OSError, UnicodeDecodeError):
            continue
        # NOTE: oslo's bool_from_string, as nova reads it (Y, 1, ...).
        if content.strip().lower() in ("1", "t", "true", "on", "y", "yes"):
            enabled.add(flavour)
    return frozenset(enabled)
