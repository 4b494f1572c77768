"""Value rules with nova's wording (``nova/api/validation/extra_specs``,
``nova/virt/hardware.py``), shared by the framework and the plugins.

Each ``check_*`` helper reports a problem on the :class:`RequestInput` and
returns the converted value, or None when the value is wrong, so a parser can
go on and find every problem in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional

from compute_plugins.request.groups import AFFINITY_POLICIES
from compute_plugins.request.inputs import RequestInput
from compute_plugins.util.text import ascii_int

_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")


def unknown_key_rule(key: str) -> str:
    return ("Validation failed; extra spec '%s' does not appear to be a valid "
            "extra spec." % key)


def enum_rule(value: Any, allowed: Sequence[str]) -> str:
    return "Validation failed; '%s' is not one of: %s." % (value, ", ".join(allowed))


def check_enum(ri: RequestInput, key: str, value: Any, allowed: Sequence[str],
               source: str = "flavor") -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str) or value not in allowed:
        ri.report(key, value, enum_rule(value, allowed), source)
        return None
    return value


def check_int(ri: RequestInput, key: str, value: Any, minimum: Optional[int] = None,
              maximum: Optional[int] = None, source: str = "flavor") -> Optional[int]:
    """nova's ``_validate_int``; accepts ints and integer strings (ASCII
    digits only: :func:`compute_plugins.util.text.ascii_int`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    else:
        try:
            number = ascii_int(str(value))
        except ValueError:
            number = None
    if number is None:
        ri.report(key, value, "Validation failed; '%s' is not a valid integer "
                  "value." % (value,), source)
        return None
    if maximum is not None and number > maximum:
        ri.report(key, value, "Validation failed; '%s' is greater than the max "
                  "value of '%s'." % (value, maximum), source)
        return None
    if minimum is not None and number < minimum:
        ri.report(key, value, "Validation failed; '%s' is less than the min "
                  "value of '%s'." % (value, minimum), source)
        return None
    return number


def parse_bool(value: Any) -> Optional[bool]:
    """oslo's ``bool_from_string(strict=True)``; None when not boolean-like."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def check_bool(ri: RequestInput, key: str, value: Any,
               source: str = "flavor") -> Optional[bool]:
    if value is None:
        return None
    result = parse_bool(value)
    if result is None:
        ri.report(key, value, "Validation failed; '%s' is not a valid "
                  "boolean-like value." % (value,), source)
    return result


def check_pattern(ri: RequestInput, key: str, value: Any, pattern: str,
                  source: str = "flavor", shown: Optional[str] = None) -> Optional[str]:
    """``value`` when it matches ``pattern`` (whole, ASCII), else None and
    the problem reported in nova's validator's words.

    :param shown: the pattern named in the message (nova's), where
        ``pattern`` is an equivalent one that matches in linear time: some
        of nova's nest quantifiers (``([a-zA-Z0-9_]+(,)?)+``) and take
        exponential time on a value that almost matches.
    """
    if value is None:
        return None
    # NOTE: re.ASCII: nova's patterns say \d, which would match "\u0663" or
    # "\uff11" (read by int() as 3 and 1); only ASCII digits are accepted.
    if not isinstance(value, str) or not re.fullmatch(pattern, value, re.ASCII):
        ri.report(key, value, "Validation failed; '%s' is not of the format "
                  "'%s'." % (value, shown or pattern), source)
        return None
    return value


def flavor_image_enum(ri: RequestInput, key: str, allowed: Sequence[str],
                      image_rule: Optional[str] = None
                      ) -> tuple[Optional[str], Optional[str]]:
    """``hw:<key>`` and its image twin ``hw_<key>``, each checked against
    ``allowed`` (None when unset or wrong). The one place every plugin reads
    an enum pair from; ``image_rule`` replaces the image's message (nova
    words some differently)."""
    flavor_value, image_value = ri.flavor_image(key)
    flavor_ok = check_enum(ri, "hw:" + key, flavor_value, allowed)
    if image_rule is None or image_value is None or image_value in allowed:
        return flavor_ok, check_enum(ri, "hw_" + key, image_value, allowed,
                                     source="image")
    ri.report("hw_" + key, image_value, image_rule, source="image")
    return flavor_ok, None


def affinity_policy(ri: RequestInput, key: str) -> Optional[str]:
    """``hw:<key>`` / its image twin ``hw_<key>``: an affinity policy
    (:data:`~compute_plugins.request.groups.AFFINITY_POLICIES`), by nova's
    rules for ``hw:pci_numa_affinity_policy``
    (``get_pci_numa_policy_constraint``: the image may not override the
    flavor); problems reported on ``ri``. Several plugins may read one
    key: each problem is reported once (the error drops duplicates)."""
    flavor_ok, image_ok = flavor_image_enum(ri, key, AFFINITY_POLICIES)
    if flavor_ok and image_ok and flavor_ok != image_ok:
        ri.report("hw_" + key, image_ok,
                  "Image property 'hw_%s' is not permitted to override the "
                  "'hw:%s' flavor extra spec." % (key, key), source="image")
        return None
    return flavor_ok or image_ok


def flavor_image_bool(ri: RequestInput, key: str) -> Optional[bool]:
    """``hw:<key>`` and its image twin ``hw_<key>`` as one boolean, by
    nova's rule for ``hw:mem_encryption`` and ``hw:ephemeral_encryption``:
    None when neither asks (both unset or false), else True, unless the
    two are given and differ, which is reported (nova's
    ``FlavorImageConflict`` wording) and gives None.
    Problems are reported on ``ri``; both keys are claimed."""
    flavor_value, image_value = ri.flavor_image(key)
    flavor_bool = check_bool(ri, "hw:" + key, flavor_value)
    image_bool = check_bool(ri, "hw_" + key, image_value, source="image")
    if not flavor_bool and not image_bool:
        return None
    if (flavor_bool is not None and image_bool is not None
            and flavor_bool != image_bool):
        _report_conflict(ri, key, flavor_value, image_bool, image_value)
        return None
    return True


def either_true(ri: RequestInput, key: str) -> bool:
    """``hw:<key>`` or ``hw_<key>`` says true (conflicts and bad values
    aside: :func:`flavor_image_bool` reports those): whether nova goes on
    to read the keys that depend on it (a memory encryption model, an
    ephemeral encryption format)."""
    return any(parse_bool(value) is True for value in ri.flavor_image(key))


def _report_conflict(ri: RequestInput, key: str, flavor_value: Any,
                     image_value: Any, given: Any) -> None:
    """nova's ``FlavorImageConflict`` between ``hw:<key>`` and ``hw_<key>``
    (the values as nova words them), reported on the image's key with the
    value the image ``given``."""
    ri.report("hw_" + key, given,
              "Flavor %s has hw:%s extra spec explicitly set to %s, "
              "conflicting with image %s which has hw_%s property "
              "explicitly set to %s" % (ri.flavor.name, key, flavor_value,
                                        ri.image_name or None, key, image_value),
              source="image")


def flavor_image_same(ri: RequestInput, key: str, allowed: Sequence[str],
                      compare: bool = True) -> Optional[str]:
    """``hw:<key>`` or its image twin ``hw_<key>``, each one of
    ``allowed``; with ``compare``, the two given and different is reported
    in nova's words (``_check_for_mem_encryption_model_conflicts``,
    ``_get_unique_flavor_image_meta``). ``compare=False`` where nova reads
    the pair only when another key asks for it (a model without
    encryption): the values are still checked. None when unset or wrong
    (or in conflict)."""
    flavor_ok, image_ok = flavor_image_enum(ri, key, allowed)
    if compare and flavor_ok and image_ok and flavor_ok != image_ok:
        _report_conflict(ri, key, flavor_ok, image_ok, image_ok)
        return None
    return flavor_ok or image_ok
