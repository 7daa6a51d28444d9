"""stats.json is the text json.dumps(..., indent=1) writes, char for char (stats/dump.py writes it
a stat at a time, for speed): on a real run's stats and on values json writes in special ways."""
import enum
import json
import math

from moehub_arch.stats.dump import format_stats_json
from moehub_arch.stats.registry import Stat, StatsSet

from conftest import mini_system, simulate


def _reference(stats):
    return json.dumps({s.name: {"value": s.value, "unit": s.unit, "desc": s.desc} for s in stats},
                      indent=1)


class Level(enum.IntEnum):
    HIGH = 3


def test_a_runs_stats_are_written_as_json_dumps_writes_them():
    stats = simulate("ubench/alltoall.yaml", *mini_system(num_gpus=4)).stats
    text = format_stats_json(stats)
    assert len(stats) > 500 and text == _reference(stats)
    assert json.loads(text)["simEvents"]["value"] == stats["simEvents"]


def test_special_values_names_and_nesting():
    odd = [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("true", True),
           ("false", False), ("none", None), ("tiny", 1e-300), ("negzero", -0.0), ("big", 10 ** 30),
           ("float_int", 1e16), ("enum", Level.HIGH), ("text", 'é "quoted" \\ \t'),
           ("nested", [1, [2, {"k": "line\nbreak"}], [], {}]), ("empty_dict", {}), ("tuple", (1, 2)),
           ('name "quoted" é', 7)]
    stats = [Stat(name, value, "ü unit", f"desc of {name}\n") for name, value in odd]
    assert format_stats_json(stats) == _reference(stats)


def test_a_repeated_name_keeps_its_first_place_and_its_last_value():
    stats = [Stat("a", 1, "u", "first"), Stat("b", 2, "u", "b"), Stat("a", 3, "v", "last")]
    assert format_stats_json(stats) == _reference(stats)
    assert list(json.loads(format_stats_json(stats))) == ["a", "b"]


def test_a_unit_or_description_that_is_not_a_string():
    # StatsSet.add takes what the Python API's caller gives; json.dumps writes null, a number...
    stats = [Stat("a", 1, None, None), Stat("b", 2, 3, 4.5), Stat("c", 3, "u", ["x", None])]
    assert format_stats_json(stats) == _reference(stats)


def test_no_stats():
    assert format_stats_json([]) == _reference([]) == "{}"
    assert format_stats_json(StatsSet()) == "{}"
