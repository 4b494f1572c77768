"""Device fits are complete: whenever the groups (ports, aliases) fit the host
offline, ``fit`` finds where; checked against an exhaustive reference
(independent code: every choice of device per group) on random small hosts.
"""

from __future__ import annotations

import itertools
import random

import pytest

from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.types import FrozenMap
from resources.sriov import fit as sriov_fit
from resources.sriov.request import AliasRequest, PortRequest, SRIOVRequest
from resources.sriov.state import DeviceState, PFState, SRIOVState
from resources.sriov.view import VFView
from resources.vgpu import fit as vgpu_fit
from resources.vgpu.request import VGPUGroup, VGPURequest
from resources.vgpu.state import PGPUState, VGPUState
from tests.unit.resources.helpers import on_cells

CASES = 400
SOCKETS: FrozenMap[int, int] = FrozenMap({0: 0, 1: 0, 2: 1})


def random_gpus(rng):
    return tuple(
        PGPUState(address="0000:%02x:00.0" % (0x80 + i), provider_uuid="gpu%d" % i,
                  mdev_type="nvidia-35", total=total, cell=rng.choice([None, 0, 1, 2]),
                  planned_mdevs=tuple("p%d-%d" % (i, k) for k in range(used)))
        for i in range(rng.randint(0, 4))
        for total in [rng.randint(1, 4)] for used in [rng.randint(0, total)])


def gpu_allowed(policy, guest, cell):
    """The policies, written out again for the reference."""
    if not guest or cell in guest:
        return True
    if policy == "required":
        return False
    if policy == "socket":
        return cell is not None and SOCKETS[cell] in {SOCKETS[c] for c in guest}
    if policy == "legacy":
        return cell is None
    return True


def vgpu_reference(gpus, counts, policy, guest):
    for choice in itertools.product(range(len(gpus)), repeat=len(counts)):
        taken = [0] * len(gpus)
        for gpu, count in zip(choice, counts, strict=True):
            taken[gpu] += count
        if all(taken[i] <= g.free for i, g in enumerate(gpus)) and all(
                gpu_allowed(policy, guest, gpus[i].cell) for i in choice):
            return True
    return False


@pytest.mark.parametrize("seed", range(4))
def test_vgpu_fit_is_complete(seed):
    rng = random.Random(seed)
    for _ in range(CASES // 4):
        gpus = random_gpus(rng)
        counts = [rng.randint(1, 3) for _ in range(rng.randint(1, 3))]
        policy = rng.choice([None, "required", "preferred", "socket"])
        guest = frozenset(rng.sample([0, 1, 2], rng.randint(0, 2)))
        request = VGPURequest(groups=tuple(VGPUGroup(str(i), c)
                                           for i, c in enumerate(counts)),
                              affinity=policy)
        state = VGPUState(pgpus=gpus, sockets=SOCKETS)
        got = vgpu_fit.fit(state, request, None, on_cells(*sorted(guest)))
        expected = vgpu_reference(gpus, counts, policy, guest)
        assert (not isinstance(got, Rejection)) == expected, (gpus, counts, policy,
                                                               guest, got)
        if expected:
            assert vgpu_fit.verify(state, request, got) is None
            by_gpu = {g.address: g for g in gpus}
            for device, count in zip(got.devices, counts, strict=True):
                assert len(device.mdev_uuids) == count
                assert gpu_allowed(policy, guest, by_gpu[device.parent_address].cell)


def random_pfs(rng):
    pfs = []
    for i in range(rng.randint(0, 4)):
        vfs = rng.randint(0, 3)
        capacity = rng.choice([None, 500, 1000])
        pfs.append(PFState(
            address="0000:%02x:00.0" % (0x5e + i), provider_uuid="pf%d" % i,
            total_vfs=vfs, physnet=rng.choice(["a", "a", "b"]),
            cell=rng.choice([None, None, 0, 1, 2]),
            vfs=tuple(VFView("0000:%02x:10.%d" % (0x60 + i, v)) for v in range(vfs)),
            egress_kbps=capacity,
            used_egress_kbps=rng.choice([0, 0, 200]) if capacity else 0))
    return tuple(pfs)


def ports_reference(pfs, ports, policy, guest):
    for choice in itertools.product(range(len(pfs)), repeat=len(ports)):
        vfs = [0] * len(pfs)
        kbps = [0] * len(pfs)
        ok = True
        for i, port in zip(choice, ports, strict=True):
            pf = pfs[i]
            vfs[i] += 1
            kbps[i] += port.min_kbps_egress
            ok = ok and pf.physnet == port.physnet and gpu_allowed(
                policy, guest, pf.cell)
            if port.min_kbps_egress:
                ok = ok and pf.egress_kbps is not None
        ok = ok and all(vfs[i] <= len(pf.vfs) for i, pf in enumerate(pfs))
        ok = ok and all(pf.used_egress_kbps + kbps[i] <= (pf.egress_kbps or 0)
                        for i, pf in enumerate(pfs) if kbps[i])
        if ok:
            return True
    return False


@pytest.mark.parametrize("seed", range(4))
def test_port_fit_is_complete(seed):
    rng = random.Random(100 + seed)
    for _ in range(CASES // 2):
        pfs = random_pfs(rng)
        ports = tuple(PortRequest("p%d" % i, i, rng.choice(["a", "a", "b"]),
                                  min_kbps_egress=rng.choice([0, 400, 500, 900]))
                      for i in range(rng.randint(1, 3)))
        policy = rng.choice(["legacy", "required", "preferred", "socket"])
        guest = frozenset(rng.sample([0, 1, 2], rng.randint(0, 1)))
        request = SRIOVRequest(ports=ports, affinity_policy=policy)
        state = SRIOVState(pfs=pfs, sockets=SOCKETS)
        got = sriov_fit.fit(state, request, None, on_cells(*sorted(guest)))
        expected = ports_reference(pfs, ports, policy, guest)
        assert (not isinstance(got, Rejection)) == expected, (pfs, ports, policy,
                                                               guest, got)
        if expected:
            assert sriov_fit.verify(state, request, got) is None
            assert len({vf.vf_address for vf in got.vfs}) == len(ports)


# -- PCI aliases ---------------------------------------------------------------------

#: alias -> (product, device type or None): what each matches.
ALIAS_RULES = {"qat": ("0443", "type-PCI"), "byclass": ("0443", None),
               "c8": ("37c8", None), "qatvf": ("37c9", "type-VF")}


def random_devices(rng):
    """Plain QATs, and PFs (0443 or 37c8) with a VF or two (37c9)."""
    devices = []
    for i in range(rng.randint(0, 3)):
        devices.append(DeviceState("0000:%02x:00.0" % (0x40 + i), "u", "type-PCI",
                                   "8086", "0443", used=rng.random() < 0.15))
    for i in range(rng.randint(0, 2)):
        pf = "0000:%02x:00.0" % (0x60 + i)
        devices.append(DeviceState(pf, "u", "type-PF", "8086",
                                   rng.choice(["0443", "37c8"])))
        for j in range(rng.randint(1, 2)):
            devices.append(DeviceState("0000:%02x:01.%d" % (0x60 + i, j), "u",
                                       "type-VF", "8086", "37c9", parent=pf,
                                       used=rng.random() < 0.15))
    return tuple(devices)


def alias_reference(devices, wanted):
    """Every choice of distinct free devices per alias, no PF with its VF."""
    def matches(name, d):
        product, kind = ALIAS_RULES[name]
        return d.product_id == product and (kind is None or d.device_type == kind)
    used = {d.address for d in devices if d.used}

    def blocked(d):
        """Used, or its PF is, or (a PF) one of its VFs is."""
        return (d.address in used or d.parent in used
                or any(v.parent == d.address for v in devices if v.used))

    options = [list(itertools.combinations(
        [d for d in devices if matches(name, d) and not blocked(d)], count))
        for name, count in wanted]
    for choice in itertools.product(*options):
        chosen = [d for group in choice for d in group]
        addresses = {d.address for d in chosen}
        if len(addresses) != len(chosen):
            continue
        if any(d.parent in addresses for d in chosen):
            continue
        return True
    return False


@pytest.mark.parametrize("seed", range(4))
def test_alias_fit_is_complete(seed):
    rng = random.Random(200 + seed)
    for _ in range(CASES // 4):
        devices = random_devices(rng)
        names = rng.sample(sorted(ALIAS_RULES), rng.randint(1, 3))
        wanted = [(name, rng.randint(1, 2)) for name in names]
        aliases = tuple(AliasRequest(name, i, count, "CUSTOM_X", vendor_id="8086",
                                     product_id=ALIAS_RULES[name][0],
                                     device_type=ALIAS_RULES[name][1])
                        for i, (name, count) in enumerate(wanted))
        request = SRIOVRequest(aliases=aliases)
        state = SRIOVState(devices=devices)
        got = sriov_fit.fit(state, request, None, {})
        expected = alias_reference(devices, wanted)
        assert (not isinstance(got, Rejection)) == expected, (devices, wanted, got)
        if expected:
            assert sriov_fit.verify(state, request, got) is None
            assert [sum(1 for d in got.devices if d.alias == name)
                    for name, _ in wanted] == [c for _, c in wanted]
