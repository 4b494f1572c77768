"""SpecReader: the request part of decided specs read once, the rest per read."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute_plugins.request.errors import RequestFormatError
from compute_plugins.request.groups import RequestGroup
from compute_plugins.request.spec import RequestSpec, SpecReader
from compute_plugins.request.types import check_fields
from compute_plugins.runtime import PluginSet
from tests.unit.request.conftest import build
from tests.unit.request.test_spec import (
    _paths,
    _rich_payload,
    _rich_text,
    _tamper,
    decision,
)


def _read(read, text):
    """What reading ``text`` gives: the spec's JSON, or the error's text."""
    try:
        spec = read(text)
    except RequestFormatError as err:
        return "refused: %s" % err
    return spec.to_json()


def test_a_reader_reads_each_decision_as_from_json_does(manager):
    reader = SpecReader()
    text = _rich_text(manager)
    first = reader.read(text, manager.plugins)
    doc = json.loads(text)
    doc["decision"]["host"] = "host2"
    doc["ports"][0]["id"] = "p2"
    second_text = json.dumps(doc)
    second = reader.read(second_text, manager.plugins)
    assert first == RequestSpec.from_json(text, manager.plugins)
    assert second == RequestSpec.from_json(second_text, manager.plugins)
    assert second.to_json() == RequestSpec.from_json(second_text, manager.plugins).to_json()
    assert second.decision.host == "host2" and second.ports[0].id == "p2"
    # NOTE: the same request part: read once, the same objects.
    assert second.requests is first.requests and second.groups is first.groups


class _OtherGroups:
    """A loaded plugin whose request groups differ from the wrapped one's
    (one more required trait): another PluginSet's plugin of that name."""

    def __init__(self, plugin):
        self._plugin = plugin

    def __getattr__(self, name):
        return getattr(self._plugin, name)

    def request_groups(self, request):
        return [RequestGroup(**{**g.__dict__, "required_traits":
                                g.required_traits | {"CUSTOM_OTHER"}})
                for g in self._plugin.request_groups(request)]


def test_a_reader_given_other_plugins_reads_with_them(manager):
    """A request part read for one PluginSet is not used for another: the
    other plugins' groups differ, so the payload is refused by them."""
    other = PluginSet.of({name: _OtherGroups(plugin) if name == "numa" else plugin
                          for name, plugin in manager.plugins.items()})
    text = _rich_text(manager)
    with pytest.raises(RequestFormatError, match="not those of its plugins"):
        RequestSpec.from_json(text, other)
    reader = SpecReader()
    reader.read(text, manager.plugins)
    with pytest.raises(RequestFormatError, match="not those of its plugins"):
        reader.read(text, other)
    assert reader.read(text, manager.plugins) == RequestSpec.from_json(
        text, manager.plugins)


def test_a_reader_keeps_at_most_its_size(manager):
    reader = SpecReader(size=2)
    texts = [build(manager, {"hw:cpu_policy": "dedicated"}, vcpus=n)
             .with_decision(decision()).to_json() for n in (1, 2, 3)]
    for text in texts:
        reader.read(text, manager.plugins)
    assert len(reader) == 2
    for text in texts:
        assert reader.read(text, manager.plugins) == RequestSpec.from_json(
            text, manager.plugins)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_tampered_payload_reads_as_from_json_reads_it(manager, data):
    """Once the untampered payload's request part is kept, a tampered one
    reads to the same spec, or is refused with the same error; a spec read
    holds every field by the rules it is built by."""
    reader = SpecReader()
    reader.read(_rich_text(manager), manager.plugins)
    doc = _rich_payload(manager)
    paths = [p for p in _paths(doc) if p[0] not in ("requests", "groups", "generic",
                                                    "plugins")]
    _tamper(doc, paths, data)
    text = json.dumps(doc)
    got = _read(lambda t: reader.read(t, manager.plugins), text)
    assert got == _read(lambda t: RequestSpec.from_json(t, manager.plugins), text)
    if not got.startswith("refused"):
        spec = reader.read(text, manager.plugins)
        check_fields(spec, "RequestSpec")
        if spec.decision is not None:
            check_fields(spec.decision, "decision")
            for name, assignment in spec.decision.assignments.items():
                check_fields(assignment, name)



@pytest.mark.parametrize("field", ["image_properties", "hints"])
def test_a_number_json_cannot_carry_back_is_refused(manager, field):
    """``1e400`` is valid JSON that Python reads as ``inf``: a spec holding
    it could never be written back as JSON, so it is refused (by the check
    a spec's free-form values get), read directly or through a reader."""
    doc = _rich_payload(manager)
    holder = doc["image"]["properties"] if field == "image_properties" else doc["hints"]
    holder["huge"] = 0
    text = json.dumps(doc).replace('"huge": 0', '"huge": 1e400')
    reader = SpecReader()
    reader.read(_rich_text(manager), manager.plugins)
    for read in (lambda t: RequestSpec.from_json(t, manager.plugins),
                 lambda t: reader.read(t, manager.plugins)):
        with pytest.raises(RequestFormatError,
                           match=r"RequestSpec\.%s\.huge: inf is not a JSON number"
                           % field):
            read(text)


def test_a_python_document_is_not_read_with_a_kept_part(manager):
    """A kept part is keyed by its JSON text, which a Python document's
    tuple shares with a list: a document ``from_dict`` refuses (a tuple
    where JSON has a list) must never be read with its JSON twin's part,
    so a Python document cannot be read with a reader at all."""
    reader = SpecReader()
    text = _rich_text(manager)
    reader.read(text, manager.plugins)
    doc = json.loads(text)
    doc["groups"] = tuple(doc["groups"])
    with pytest.raises(RequestFormatError, match="expected list, got 'tuple'"):
        RequestSpec.from_dict(doc, manager.plugins)
    # NOTE: only a document read from JSON text (RequestSpec.from_json,
    # SpecReader.read) may be read with kept parts.
    with pytest.raises(TypeError):
        RequestSpec.from_dict(doc, manager.plugins, reader)
