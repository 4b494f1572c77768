"""The vGPU plugin's host state: mdevs per physical GPU, free and used.

Per pGPU of the view (one that offers an enabled mdev type): its provider
uuid, address, NUMA cell, type and ``total`` (the provider's ``VGPU``
inventory: available instances plus the mdevs of the type that exist, with
``[mdev_<type>] max_instances`` already applied by the view). The mdevs the
assignments in force use are split into

- ``used_mdevs``: they exist on the pGPU now;
- ``planned_mdevs``: not (yet) on the host: the compute host creates them
  with that uuid when it starts the guest, so they take one of the pGPU's
  instances until then, and are ``used_mdevs`` once discovery sees them;

and the existing mdevs no assignment names are ``free_mdevs`` (a guest takes
those first, as nova's ``_allocate_mdevs`` does).

Uuids of mdevs to create are chosen at fit time from the state
(:func:`new_mdev_uuid`): ``uuid5`` of the pGPU's provider uuid and the
smallest index whose uuid the pGPU does not know. The scheduler and a
``compute-plugins fit`` what-if thus agree, and two decisions made on the
same state for two guests name the same uuid: the second claim's ``verify``
sees it used and rejects it (the host changed in between), instead of two
guests sharing one mdev.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Optional

from compute_plugins.plugin import names
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.request.types import FrozenMap
from compute_plugins.tree.contribution import Providers
from resources.vgpu.provider import KIND
from resources.vgpu.request import PLUGIN, VGPUAssignment
from resources.vgpu.view import VGPUView


@dataclasses.dataclass(frozen=True)
class PGPUState:
    """One physical GPU: its instances of its mdev type, free and used.

    :param total: instances the pGPU offers (its ``VGPU`` inventory).
    :param cell: its NUMA cell (None: no NUMA information or no ``numa``
        plugin).
    """

    address: str
    provider_uuid: str
    mdev_type: str
    total: int
    cell: Optional[int] = None
    resource_class: str = "VGPU"
    free_mdevs: tuple[str, ...] = ()
    used_mdevs: tuple[str, ...] = ()
    planned_mdevs: tuple[str, ...] = ()

    @property
    def used(self) -> int:
        """Instances taken by the assignments in force."""
        return len(self.used_mdevs) + len(self.planned_mdevs)

    @property
    def free(self) -> int:
        """Instances a new guest can get (existing free ones or new ones)."""
        return self.total - self.used

    @property
    def creatable(self) -> int:
        """Instances that can still be created (not existing, not planned)."""
        return (self.total - len(self.free_mdevs) - len(self.used_mdevs)
                - len(self.planned_mdevs))

    def knows(self, mdev_uuid: str) -> bool:
        """Whether ``mdev_uuid`` exists on the pGPU or is planned on it."""
        return (mdev_uuid in self.free_mdevs or mdev_uuid in self.used_mdevs
                or mdev_uuid in self.planned_mdevs)


@dataclasses.dataclass(frozen=True)
class VGPUState(PluginState):
    """The pGPUs of a host and its cells' sockets (for NUMA affinity)."""

    pgpus: tuple[PGPUState, ...] = ()
    sockets: FrozenMap[int, Optional[int]] = dataclasses.field(
        default_factory=FrozenMap)

    def pgpu(self, address: str) -> Optional[PGPUState]:
        """The pGPU at ``address`` (None when the host offers none there)."""
        for gpu in self.pgpus:
            if gpu.address == address:
                return gpu
        return None

    def consumed(self, assignment: VGPUAssignment) -> VGPUState:
        """This state once ``assignment`` is taken too: what a scheduler
        gave an earlier guest of the same request on this host, before the
        host publishes again (nova's ``num_instances > 1``). Its existing
        mdevs become used, the others planned, so the next guest's fit
        takes other mdevs (and new uuids: :func:`new_mdev_uuid` skips the
        planned ones).

        :raises AssignmentConflict: a pGPU the state lacks, an mdev taken
            already or on another pGPU, or more mdevs than a pGPU offers.
        """
        gpus = {gpu.address: gpu for gpu in self.pgpus}
        for device in assignment.devices:
            gpu = gpus.get(device.parent_address)
            if gpu is None:
                raise AssignmentConflict(PLUGIN, "an earlier guest of the request "
                                         "uses pGPU %s, which offers no vGPUs on "
                                         "this host" % device.parent_address)
            free, used = list(gpu.free_mdevs), list(gpu.used_mdevs)
            planned = list(gpu.planned_mdevs)
            for mdev in device.mdev_uuids:
                if mdev in used or mdev in planned:
                    raise AssignmentConflict(PLUGIN, "mdev %s on pGPU %s is taken "
                                             "twice (an earlier guest of the "
                                             "request)" % (mdev, gpu.address))
                # NOTE: the pGPUs as taken so far: an mdev planned by an
                # earlier device of the assignment counts as well.
                owner = next((g for g in gpus.values() if g.knows(mdev)), None)
                if owner is not None and owner.address != gpu.address:
                    raise AssignmentConflict(PLUGIN, "mdev %s is on pGPU %s, an "
                                             "earlier guest of the request puts it "
                                             "on pGPU %s"
                                             % (mdev, owner.address, gpu.address))
                if mdev in free:
                    free.remove(mdev)
                    used.append(mdev)
                else:
                    planned.append(mdev)
            taken = dataclasses.replace(gpu, free_mdevs=tuple(free),
                                        used_mdevs=tuple(sorted(used)),
                                        planned_mdevs=tuple(sorted(planned)))
            if taken.creatable < 0:
                raise AssignmentConflict(PLUGIN, "pGPU %s offers %d mdevs of type "
                                         "%s; with an earlier guest of the request "
                                         "it would hold %d" % (
                                             gpu.address, gpu.total, gpu.mdev_type,
                                             gpu.total - taken.creatable))
            gpus[gpu.address] = taken
        return dataclasses.replace(self, pgpus=tuple(gpus[g.address] for g in self.pgpus))

    def owner_of(self, mdev_uuid: str) -> Optional[PGPUState]:
        """The pGPU on which ``mdev_uuid`` exists or is planned."""
        for gpu in self.pgpus:
            if gpu.knows(mdev_uuid):
                return gpu
        return None


def new_mdev_uuid(provider_uuid: str, index: int) -> str:
    """Uuid of the ``index``-th mdev created on the pGPU of ``provider_uuid``."""
    return str(uuid.uuid5(names.UUID_NAMESPACE, "mdev/%s/%d" % (provider_uuid, index)))


def gpu_provider(providers: Providers, address: str) -> str:
    """The uuid of the provider of the pGPU at ``address``."""
    return providers[names.device_provider_name(providers.nodename, KIND, address)]


def build_state(view: VGPUView, providers: Providers,
                assignments: Sequence[VGPUAssignment]) -> VGPUState:
    """The :class:`VGPUState` of ``view`` under ``assignments``.

    :param providers: the plugin's providers (one per pGPU, by name).

    :raises AssignmentConflict: an assignment names a pGPU the host does not
        offer (or its provider, or type, differently), an mdev twice, an
        mdev that exists on another pGPU, or more mdevs than a pGPU offers.
    """
    gpus = {gpu.address: gpu for gpu in view.gpus}
    existing_on = {mdev: gpu.address for gpu in view.gpus for mdev in gpu.mdevs}
    used: dict[str, list[str]] = {address: [] for address in gpus}
    planned: dict[str, list[str]] = {address: [] for address in gpus}
    seen: dict[str, str] = {}
    for assignment in assignments:
        for device in assignment.devices:
            address = device.parent_address
            gpu = gpus.get(address)
            where = "group %s" % device.requester_id
            if gpu is None:
                raise AssignmentConflict(PLUGIN, "%s uses pGPU %s, which offers "
                                         "no vGPUs on this host" % (where, address))
            provider = gpu_provider(providers, address)
            if device.provider_uuid != provider:
                raise AssignmentConflict(PLUGIN, "%s names provider %s for pGPU "
                                         "%s, whose provider is %s"
                                         % (where, device.provider_uuid, address,
                                            provider))
            if device.mdev_type and device.mdev_type != gpu.mdev_type:
                raise AssignmentConflict(PLUGIN, "%s uses mdev type %s on pGPU %s, "
                                         "which offers %s" % (where, device.mdev_type,
                                                              address, gpu.mdev_type))
            for mdev in device.mdev_uuids:
                if mdev in seen:
                    raise AssignmentConflict(PLUGIN, "mdev %s is assigned twice "
                                             "(groups %s and %s)"
                                             % (mdev, seen[mdev], device.requester_id))
                seen[mdev] = device.requester_id
                home = existing_on.get(mdev)
                if home is not None and home != address:
                    raise AssignmentConflict(PLUGIN, "mdev %s exists on pGPU %s, "
                                             "%s puts it on pGPU %s"
                                             % (mdev, home, where, address))
                (used if home is not None else planned)[address].append(mdev)
    states = []
    for address, gpu in gpus.items():
        # NOTE: every existing mdev holds an instance, free or used; the
        # planned ones need instances no mdev holds yet.
        room = gpu.total - len(gpu.mdevs)
        if len(planned[address]) > room:
            raise AssignmentConflict(
                PLUGIN, "pGPU %s offers %d mdevs of type %s of which %d exist; "
                "the assignments create %d more" % (
                    address, gpu.total, gpu.mdev_type, len(gpu.mdevs),
                    len(planned[address])))
        in_use = set(used[address])
        states.append(PGPUState(
            address=address,
            provider_uuid=gpu_provider(providers, address),
            mdev_type=gpu.mdev_type, total=gpu.total, cell=gpu.cell,
            resource_class=gpu.resource_class,
            free_mdevs=tuple(m for m in gpu.mdevs if m not in in_use),
            used_mdevs=tuple(sorted(in_use)),
            planned_mdevs=tuple(sorted(planned[address]))))
    return VGPUState(pgpus=tuple(states), sockets=view.sockets)
