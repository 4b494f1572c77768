"""The documents ``bench.decode`` decodes and the decoders' comparison test
checks: what the scheduler reads at scale, made by the real plugins.

- the published states of ``bench.schedule``'s four host shapes (2 cells,
  8 cells, GPU, SR-IOV), each plugin's ``state`` document as the store holds
  it, decoded with the plugin's ``state_type`` (what the scheduler does for
  every host that published);
- RequestSpec payloads (``RequestSpec.to_dict``) cut into the parts
  ``RequestSpec.from_dict`` decodes, each with the type it decodes it as:
  pinned, mixed and shared guests, with ports, with a decision, and the
  previous format's fixture (``tests/fixtures/specs/request-spec-1.0.json``).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from bench.schedule import cloud
from compute_plugins.request.generic import GenericRequest
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.inputs import Flavor, Port
from compute_plugins.request.spec import Decision, RequestSpec, build_request_spec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime.plugin_set import PluginSet

SPEC_1_0 = (pathlib.Path(__file__).resolve().parents[2]
            / "tests" / "fixtures" / "specs" / "request-spec-1.0.json")

#: Guests whose specs are decoded: flavor extra specs and ports.
GUESTS: tuple[tuple[dict[str, str], list[dict[str, Any]]], ...] = (
    ({}, []),
    ({"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}, []),
    ({"hw:numa_nodes": "2", "hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0,2",
      "hw:mem_page_size": "large", "resources1:VGPU": "1",
      "trait1:CUSTOM_MDEV_TYPE_NVIDIA_35": "required", "group_policy": "isolate",
      "trait:HW_CPU_X86_AVX2": "required"}, []),
    ({"hw:cpu_policy": "dedicated"},
     [{"id": "p1", "vnic_type": "direct", "physnet": "physnet1", "min_kbps_egress": 10}]),
)


class Payload(NamedTuple):
    """One document and the type it is decoded as (``decode(hint, doc, where)``)."""

    hint: Any
    doc: Any
    where: str


def states() -> list[Payload]:
    """Every plugin's published state of one host of each shape."""
    found = []
    for shape in cloud.SHAPES:
        name = "decode-%s" % shape
        manager = cloud.manager(shape)
        manager.discover(cloud.host_info(name, shape))
        built, broken = manager.host_states(name, {})
        if broken:
            raise RuntimeError("host %s: %s" % (name, broken))
        documents, _ = manager.plugins.encode_states(built)
        for plugin, document in json.loads(json.dumps(documents)).items():
            kind = manager.plugins.state_type(plugin)
            if kind is not None and document["state"] is not None:
                found.append(Payload(kind, document["state"], "%s.state" % plugin))
    return found


def spec_documents(plugins: PluginSet) -> list[dict[str, Any]]:
    """RequestSpec payloads as the scheduler writes them (JSON text's shapes)."""
    docs = []
    for extra_specs, ports in GUESTS:
        spec = build_request_spec(plugins, {"name": "f", "vcpus": 4, "memory_mb": 4096,
                                            "extra_specs": extra_specs}, ports=ports)
        docs.append(json.loads(spec.to_json()))
    old = RequestSpec.from_dict(json.loads(SPEC_1_0.read_text()), plugins)
    docs.append(json.loads(old.to_json()))
    return docs


def spec_parts(doc: Mapping[str, Any], plugins: PluginSet) -> list[Payload]:
    """The parts of a RequestSpec payload ``RequestSpec.from_dict`` decodes."""
    parts = [Payload(Flavor, doc["flavor"], "flavor"),
             Payload(FrozenMap[str, Any], doc["image"]["properties"], "image.properties"),
             Payload(tuple[Port, ...], doc["ports"], "ports"),
             Payload(FrozenMap[str, Any], doc["hints"], "hints"),
             Payload(GenericRequest, doc["generic"], "generic"),
             Payload(tuple[RequestGroup, ...], doc["groups"], "groups")]
    for name, body in doc["requests"].items():
        parts.append(Payload(plugins.request_type(name), body, "requests.%s" % name))
    if doc["decision"] is not None:
        decision = dict(doc["decision"])
        for name, body in decision.pop("assignments", {}).items():
            parts.append(Payload(plugins.assignment_type(name), body,
                                 "assignments.%s" % name))
        parts.append(Payload(Decision, decision, "decision"))
    return parts


def specs(plugins: PluginSet) -> list[Payload]:
    """The parts of every payload of :func:`spec_documents`."""
    return [part for doc in spec_documents(plugins) for part in spec_parts(doc, plugins)]
