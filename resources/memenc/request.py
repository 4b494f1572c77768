"""The memenc plugin's request: ``hw:mem_encryption`` as nova reads it.

nova's ``hardware.get_mem_encryption_constraint`` and the scheduler's
``_translate_mem_encryption_request``:

- ``hw:mem_encryption`` (flavor) / ``hw_mem_encryption`` (image): true in
  either asks for memory encryption; both given and different is nova's
  ``FlavorImageConflict``;
- ``hw:mem_encryption_model`` / ``hw_mem_encryption_model``: one of nova's
  models (default ``amd-sev``), the two may not differ when encryption is
  asked (nova ignores the models otherwise);
- the image must say ``hw_firmware_type=uefi``; an image
  ``hw_machine_type`` must be of the q35 family; SEV-SNP and TDX need
  ``hw_firmware_stateless=true`` (nova's ``check_constraints``). A
  machine type from the host's ``[libvirt] hw_machine_type`` is not known
  here (nova's driver checks it at spawn);
- the request: one ``MEM_ENCRYPTION_CONTEXT`` with the model's trait. nova
  asks it in the unsuffixed group; here a group of its own (``_MEMENC``),
  so that slot and trait are on one provider (nova 34 puts both on the
  ``<nodename>_<model>`` child: the same providers match).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import os_resource_classes as orc

from compute_plugins.request import rules
from compute_plugins.request.groups import (
    KIND_DEVICE,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import FrozenMap, enum_field
from resources.memenc.view import DEFAULT_MODEL, MODELS

PLUGIN = "memenc"
GROUP = "_MEMENC"
REQUIRED_FIRMWARE = "uefi"
REQUIRED_MACHINE = "q35"


@dataclasses.dataclass(frozen=True)
class MemEncRequest(PluginRequest):
    """A guest whose memory is encrypted with ``model`` (nova's name)."""

    model: str = enum_field(tuple(MODELS), DEFAULT_MODEL)


@dataclasses.dataclass(frozen=True)
class MemEncAssignment(PluginAssignment):
    """The provider of the guest's memory encryption slot.

    :param model: the model (nova's name), which the guest XML follows.
    :param provider_uuid: the ``<nodename>_<model>`` provider.
    """

    model: str = enum_field(tuple(MODELS), DEFAULT_MODEL)
    provider_uuid: str = ""
    requester_id: str = GROUP


def parse(ri: RequestInput) -> Optional[MemEncRequest]:
    """The request of ``ri``, or None when it asks no memory encryption
    (problems reported on ``ri``, nova's wording)."""
    wanted = rules.flavor_image_bool(ri, "mem_encryption")
    # NOTE: nova compares the two models only once encryption is asked.
    model_name = rules.flavor_image_same(ri, "mem_encryption_model", tuple(MODELS),
                                         compare=rules.either_true(ri, "mem_encryption"))
    if not wanted:
        return None
    model = MODELS[model_name or DEFAULT_MODEL]
    image = ri.image_properties
    firmware = image.get("hw_firmware_type")
    if firmware != REQUIRED_FIRMWARE:
        # NOTE: on the key that asked, as nova names the requesters.
        flavor_asked = rules.parse_bool(ri.extra_specs.get("hw:mem_encryption", False))
        requesters = ([("hw:mem_encryption", "flavor",
                        "hw:mem_encryption extra spec in %s flavor" % ri.flavor.name)]
                      if flavor_asked else []) + (
            [("hw_mem_encryption", "image", "hw_mem_encryption property of image %s"
              % (ri.image_name or "<no-id>"))]
            if rules.parse_bool(image.get("hw_mem_encryption", False)) else [])
        key, source, _ = requesters[0]
        ri.report(key, ri.extra_specs.get(key) if source == "flavor" else image.get(key),
                  "Memory encryption is requested by %s but the image metadata "
                  "doesn't have the 'hw_firmware_type' property set to '%s'"
                  % (" and ".join(r[2] for r in requesters), REQUIRED_FIRMWARE),
                  source=source)
    machine = image.get("hw_machine_type")
    if machine is not None and REQUIRED_MACHINE not in str(machine):
        ri.report("hw_machine_type", machine,
                  "%s type is required for %s to work" % (REQUIRED_MACHINE, model.name),
                  source="image")
    if model.stateless_firmware and rules.parse_bool(
            image.get("hw_firmware_stateless", False)) is not True:
        ri.report("hw_firmware_stateless", image.get("hw_firmware_stateless"),
                  "The %s memory encryption model requires stateless firmware "
                  "but the image metadata doesn't have the "
                  "'hw_firmware_stateless' property set to True" % model.name,
                  source="image")
    if ri.has_problems():
        return None
    return MemEncRequest(model=model.name)


def request_groups(req: MemEncRequest) -> list[RequestGroup]:
    """One ``MEM_ENCRYPTION_CONTEXT`` with the model's trait."""
    return [RequestGroup(
        requester_id=GROUP,
        resources=FrozenMap({orc.MEM_ENCRYPTION_CONTEXT: 1}),
        required_traits=frozenset({MODELS[req.model].trait}),
        owner=PLUGIN, kind=KIND_DEVICE)]


def samples() -> list[RequestInput]:
    """SEV from the flavor; SEV from the image; SEV-ES by model."""
    uefi = {"hw_firmware_type": "uefi", "hw_machine_type": "q35"}
    return [
        RequestInput.from_dicts({"name": "memenc.sev", "vcpus": 2, "memory_mb": 2048,
                                 "extra_specs": {"hw:mem_encryption": "true"}}, uefi),
        RequestInput.from_dicts({"name": "memenc.image", "vcpus": 2, "memory_mb": 2048},
                                {**uefi, "hw_mem_encryption": True}),
        RequestInput.from_dicts(
            {"name": "memenc.sev_es", "vcpus": 4, "memory_mb": 4096,
             "extra_specs": {"hw:mem_encryption": "true",
                             "hw:mem_encryption_model": "amd-sev-es"}}, uefi),
    ]
