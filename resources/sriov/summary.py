"""The SR-IOV / PCI assignment in words (``compute-plugins fit``): a line
per port or alias group."""

from __future__ import annotations

from resources.sriov.request import SRIOVAssignment, SRIOVRequest


def describe(request: SRIOVRequest, assignment: SRIOVAssignment) -> list[str]:
    """``port <id> -> VF <address> of PF <address>``, ``_PCI0 -> <address>``."""
    ports = {port.requester_id: port for port in request.ports}
    aliases = {alias.requester_id: alias for alias in request.aliases}
    lines = []
    for vf in assignment.vfs:
        port = ports.get(vf.requester_id)
        alias = aliases.get(vf.requester_id)
        if port is not None:
            what = "port %s (%s)" % (vf.port_id or port.port_id or vf.requester_id,
                                     port.physnet or "tunneled")
        elif alias is not None:
            what = "alias %s" % alias.name
        else:
            what = vf.requester_id
        if vf.vf_address and vf.vdpa_dev:
            lines.append("%s -> VF %s (vDPA %s) of PF %s" % (
                what, vf.vf_address, vf.vdpa_dev, vf.pf_address))
        elif vf.vf_address:
            lines.append("%s -> VF %s of PF %s" % (what, vf.vf_address, vf.pf_address))
        else:
            lines.append("%s -> %s" % (what, vf.pf_address))
    return lines
