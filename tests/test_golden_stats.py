"""Golden stats: the model stats of a representative set of shipped configs are exactly those
recorded in tests/data/golden_stats.json (tools/golden_stats.py). A refactor must leave them
bit-identical; a change meant to change the model records them again
(`python tools/golden_stats.py --record`) and says so in its commit."""
import json

import pytest

from conftest import REPO, load_script

GOLDEN = load_script(REPO / "tools" / "golden_stats.py")
RECORDED = json.loads(GOLDEN.GOLDEN.read_text())


def test_every_case_is_recorded():
    assert set(RECORDED) == set(GOLDEN.CASES)


@pytest.mark.parametrize("case", sorted(GOLDEN.CASES))
def test_stats_are_bit_identical_to_the_recorded_ones(case):
    assert GOLDEN.run_case(case) == RECORDED[case], (
        f"{case}: the model stats changed; if that is intended, record them again with "
        f"python tools/golden_stats.py --record --case {case} (and say why in the commit)")
