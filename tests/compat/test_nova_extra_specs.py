"""Differential: our extra-spec parsing against nova's API validators.

Every validator of ``nova.api.validation.extra_specs`` is instantiated
(parameters such as ``{num}``, ``{group}``, ``{resource}`` get sample
values) and sorted into keys we *know* (a built-in plugin or the framework
claims the key) and keys we do not. On every key both know, nova's verdict
and ours agree on valid and invalid values (nova's enums, ranges, booleans
and patterns, plus values outside them), each tested in a flavor where the
key is meaningful (``hw:cpu_thread_policy`` with ``hw:cpu_policy=dedicated``
...). The few values where we are stricter on purpose are listed in
:data:`STRICTER` with the reason. The keys nova knows and we do not must be
exactly those listed, with why, in doc/source/nova-compat.md.

Skipped without nova, except under ``COMPUTE_PLUGINS_COMPAT``.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova  # noqa: F401
else:
    pytest.importorskip("nova.api.validation.extra_specs.validators")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from nova import exception as nova_exception
    from nova.api.validation.extra_specs import validators as nova_validators

from compute_plugins.request import generic  # noqa: E402
from compute_plugins.request.errors import RequestValidationError  # noqa: E402
from compute_plugins.request.inputs import RequestInput  # noqa: E402
from compute_plugins.request.spec import RequestSpec  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402

nova_validators.load_validators()

DOC = Path(__file__).resolve().parents[2] / "doc" / "source" / "nova-compat.md"

#: Sample values of the validators' name parameters.
PARAMS = {"num": ["0"], "group": ["", "1"], "resource": ["FOO"],
          "trait": ["FOO"], "key": ["foo"], "filter": [""]}

FLAVOR = {"name": "f", "vcpus": 4, "memory_mb": 4096}
DEDICATED = {"hw:cpu_policy": "dedicated"}
NUMA2 = {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3",
         "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}
#: Extra specs that make a key meaningful (nova ignores some keys without
#: them; we refuse a key that would be ignored).
CONTEXT = {
    # nova's numa_get_constraints: LockMemoryForbidden without a page size
    "hw:locked_memory": {"hw:mem_page_size": "small"},
    "hw:cpu_thread_policy": DEDICATED,
    "hw:emulator_threads_policy": DEDICATED,
    "hw:cpu_realtime": DEDICATED,
    "hw:cpu_realtime_mask": {**DEDICATED, "hw:cpu_realtime": "yes"},
    "hw:cpu_dedicated_mask": {"hw:cpu_policy": "mixed"},
    "hw:numa_cpus.0": NUMA2,
    "hw:numa_mem.0": NUMA2,
    "trait:HW_CPU_HYPERTHREADING": DEDICATED,
    "trait1:HW_CPU_HYPERTHREADING": DEDICATED,
}
#: Context for one value of a key.
VALUE_CONTEXT = {
    ("hw:cpu_policy", "mixed"): {"hw:cpu_dedicated_mask": "^0"},
    ("hw:cpu_realtime", "true"): {"hw:cpu_realtime_mask": "^0"},
    ("hw:cpu_realtime", "yes"): {"hw:cpu_realtime_mask": "^0"},
    ("hw:cpu_realtime", "1"): {"hw:cpu_realtime_mask": "^0"},
}
#: Valid values for keys whose nova pattern allows values our semantics
#: must refuse in this flavor (a CPU mask naming CPU 9 of a 4-vCPU guest).
VALID = {
    "hw:cpu_dedicated_mask": ["^0", "1-3", "^0,^1"],
    "hw:cpu_realtime_mask": ["^0", "^0-1"],
    "hw:numa_cpus.0": ["0-1", "0,1"],
    "hw:numa_mem.0": ["2048"],
    "hw:numa_nodes": ["1", "2", "4"],
    "hw:mem_page_size": ["small", "large", "any", "2048", "2MB", "2MiB",
                         "1GB", "4KiB"],
    "pci_passthrough:alias": ["a1:1", "a1:2"],
}
INVALID = {
    "hw:cpu_dedicated_mask": ["x", "0-", "^"],
    "hw:cpu_realtime_mask": ["x", "0-", "^"],
    "hw:numa_cpus.0": ["x", "0-", ""],
    "hw:mem_page_size": ["bogus", "2XB", "-1"],
    "pci_passthrough:alias": ["a1", "a1:x", ":1"],
}
#: Where nova's validator accepts and we refuse, on purpose: (key regex,
#: value regex, why). nova's API validator checks syntax only; these are
#: refused by nova's later steps too, or here by design.
STRICTER = [
    (r"resources.*:.*", r"-1",
     "a negative amount: Placement can never allocate it (nova's validator "
     "has no minimum; the scheduler's query then fails)"),
    (r"resources:(VCPU|MEMORY_MB)", r"0",
     "the numa plugin always takes the guest's CPUs and memory from host NUMA "
     "nodes; nova drops the class, here the key is refused"),
    (r"resources[^:]+:(VCPU|PCPU|MEMORY_MB)", r".*",
     "numbered CPU or memory groups: the numa plugin splits CPUs and memory "
     "over NUMA nodes (hw:numa_nodes, hw:numa_cpus.N, hw:numa_mem.N)"),
    (r"hw:mem_encryption", r"(?i)(1|t|true|on|y|yes)",
     "memory encryption without an image saying hw_firmware_type=uefi: nova's "
     "API refuses it too when the server is created "
     "(get_mem_encryption_constraint); its extra spec validator alone does not "
     "see the image"),
]


def stricter(key, value):
    return next((why for k, v, why in STRICTER
                 if re.fullmatch(k, key) and re.fullmatch(v, value)), None)


def names_of(validator):
    """The validator's name with each parameter replaced by samples."""
    names = [validator.name]
    for param in validator.parameters:
        names = [n.replace("{%s}" % param["name"], sample)
                 for n in names for sample in PARAMS[param["name"]]]
    return names


def nova_values(validator, key):
    """(valid, invalid) sample values by nova's own value rules."""
    rule = validator.value
    if key in VALID or key in INVALID:
        return VALID.get(key, []), INVALID.get(key, [])
    if rule["type"] is bool:
        return ["true", "false", "yes", "no", "1", "0"], ["bogus", "2"]
    if rule["type"] is int:
        low = rule.get("min", -1)
        valid = [str(low), str(low + 1)]
        invalid = ["x", "1.5"] + ([str(rule["min"] - 1)] if "min" in rule else [])
        if "max" in rule:
            valid.append(str(rule["max"]))
            invalid.append(str(rule["max"] + 1))
        return valid, invalid
    if "enum" in rule:
        return [str(v) for v in rule["enum"]], ["bogus", ""]
    return ["x"], []


def nova_accepts(key, value):
    try:
        nova_validators.validate(key, value)
    except nova_exception.ValidationError:
        return False
    return True


@pytest.fixture(scope="module")
def plugins():
    conf, fixture = helpers.make_conf()
    conf.set_override("alias", [json.dumps({
        "name": "a1", "vendor_id": "8086", "product_id": "0443",
        "device_type": "type-PCI"})], "pci")
    yield helpers.manager(conf, tuple(helpers.PLUGINS)).plugins
    fixture.cleanUp()


def flavor_for(key, value):
    specs = {**CONTEXT.get(key, {}), **VALUE_CONTEXT.get((key, value), {})}
    group = re.match(r"^trait([a-zA-Z0-9_-]+):", key)
    if group:  # a numbered group needs resources (Placement's rule)
        specs["resources%s:CUSTOM_FOO" % group.group(1)] = "1"
    specs[key] = value
    return {**FLAVOR, "extra_specs": specs}


def claimed(plugins, key):
    """Does a plugin or the framework claim ``key`` (know it)?"""
    ri = RequestInput.from_dicts(flavor_for(key, "x"))
    keys = set()
    for name, plugin in plugins.items():
        view = ri.for_plugin(name)
        plugin.parse_request(view)
        keys |= view.claimed
    view = ri.for_plugin("framework")
    generic.parse(view, frozenset(keys))
    keys |= view.claimed
    return ("flavor", key) in keys


def our_problems(plugins, key, value):
    """Our problems with ``key`` (and with any other key: a test mistake)."""
    try:
        RequestSpec.build(plugins, RequestInput.from_dicts(flavor_for(key, value)))
    except RequestValidationError as err:
        return [p for p in err.problems]
    return []


#: nova has one validator per standard trait (about 380), all alike: a
#: sample of them is compared (every 20th, and those with a meaning here).
TRAIT_SAMPLE = 20
TRAITS_KEPT = ("trait{group}:HW_CPU_HYPERTHREADING", "trait{group}:CUSTOM_{trait}",
               "trait{group}:COMPUTE_STATUS_DISABLED")


def every_key():
    traits = 0
    for name, validator in sorted(nova_validators.VALIDATORS.items()):
        if name.startswith("trait{") and name not in TRAITS_KEPT:
            traits += 1
            if traits % TRAIT_SAMPLE:
                continue
        for key in names_of(validator):
            yield key, validator


def unknown_to_us(plugins):
    return sorted({validator.name for key, validator in every_key()
                   if not claimed(plugins, key)})


def test_verdicts_agree_on_every_key_both_know(plugins):
    compared = keys = stricter_values = 0
    disagreements = []
    for key, validator in every_key():
        if not claimed(plugins, key):
            continue
        keys += 1
        valid, invalid = nova_values(validator, key)
        for value in valid + invalid:
            theirs = nova_accepts(key, value)
            problems = our_problems(plugins, key, value)
            mine = [p for p in problems if p.key == key]
            # a context key may be refused too, only because this one is bad
            assert mine or not problems, (key, value, problems)
            ours = not problems
            compared += 1
            if ours == theirs:
                continue
            if theirs and stricter(key, value):
                stricter_values += 1
                continue
            disagreements.append((key, value, theirs, [p.rule for p in problems]))
    print("\nextra specs: %d keys both know, %d values compared, %d where we "
          "are stricter on purpose" % (keys, compared, stricter_values))
    assert disagreements == []
    assert keys > 30


def test_the_keys_nova_knows_and_we_do_not_are_documented(plugins):
    # the extra-spec part of the page only: its other parts list methods
    # and options the same way
    text = DOC.read_text()
    start = text.index("# Extra specs nova knows and the plugins do not")
    end = text.find("\n# ", start + 1)
    section = text[start:] if end < 0 else text[start:end]
    documented = set(re.findall(r"^- `([^`]+)`", section, re.MULTILINE))
    headings = {"capabilities:*", "quota:*"}  # the doc's group lines
    missing = set(unknown_to_us(plugins))
    print("\nkeys nova knows and we do not: %d (doc/source/nova-compat.md)" % len(missing))
    assert missing == documented - headings


def test_each_stricter_rule_is_needed(plugins):
    """Every rule of STRICTER names values nova accepts and we refuse."""
    samples = [("resources:VCPU", "-1"), ("resources:MEMORY_MB", "0"),
               ("resources1:PCPU", "1"), ("hw:mem_encryption", "true")]
    for (key, value), (rule, _, _) in zip(samples, STRICTER, strict=True):
        assert re.fullmatch(rule, key)
        assert nova_accepts(key, value), key
        assert our_problems(plugins, key, value), key
