"""Human output is wrapped to 100 columns, never cut
(:func:`compute_plugins.util.text.wrap`)."""

from __future__ import annotations

from compute_plugins.util.text import wrap, wrap_lines

REASON = ("numa: guest node 0 fits no host cell: host cell 0 has no 1048576 KiB "
          "pages, guest node 0 needs 49152 MiB in them; host cell 1 has no 1048576 "
          "KiB pages, guest node 0 needs 49152 MiB in them")
QUERY = ("GET /resource_providers?resources=NET_BW_EGR_KILOBIT_PER_SEC:5000000,"
         "NET_BW_IGR_KILOBIT_PER_SEC:5000000,SRIOV_NET_VF:1&required="
         "CUSTOM_PHYSNET_PHYSNET2,CUSTOM_VNIC_TYPE_DIRECT")


def test_a_long_line_is_wrapped_under_a_hanging_indent_with_every_word():
    lines = wrap(REASON, indent="      ", width=60)
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("      numa: ")
    assert all(line.startswith("          ") and line[10] != " " for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == REASON


def test_a_word_longer_than_a_line_breaks_after_a_comma_or_an_ampersand():
    lines = wrap(QUERY, indent="  ", hang="      ", width=80)
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines)
    assert "".join(lines).replace(" ", "") == QUERY.replace(" ", "")
    assert all(line.rstrip().endswith((",", "&", "GET")) for line in lines[:-1])


def test_a_word_with_no_break_is_split_anywhere_but_kept_whole():
    word = "x" * 250
    lines = wrap(word, width=100)
    assert [len(line) for line in lines] == [96, 100, 62]
    assert "".join(line.strip() for line in lines) == word


def test_short_lines_are_left_as_they_are():
    text = "a  b\n  │   └── c  [d]\n"
    assert wrap_lines(text) == text


def test_the_spaces_of_a_value_are_kept_even_at_a_break():
    text = "value 'a  b   c' " * 8
    text = text.strip()
    lines = wrap(text, indent="  ", hang="      ", width=30)
    assert all(len(line) <= 30 for line in lines)
    assert " ".join([lines[0][2:]] + [line[6:] for line in lines[1:]]) == text
