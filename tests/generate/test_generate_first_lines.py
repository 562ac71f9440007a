"""The compact first-line index behind the duplicate-id check."""

from fleetgen.generate.prompts.worklist import FirstLines


def test_first_lines_matches_a_dict_through_growth():
    index, reference = FirstLines(bits=2), {}
    for line in range(1, 5001):
        rid = f"id-{line % 1700}"
        assert index.setdefault(rid, line) == reference.setdefault(rid, line)
    assert len(index) == len(reference) == 1700


def test_first_lines_keeps_the_first_line_of_a_repeated_id():
    index = FirstLines()
    assert index.setdefault("a", 3) == 3
    assert index.setdefault("b", 4) == 4
    assert index.setdefault("a", 9) == 3
