"""Statistics: declarations (name, unit, description), collection from State, and dump formats."""
from .registry import Stat, StatsSet
from .dump import write_stats_csv, write_stats_json, write_stats_txt

__all__ = ["Stat", "StatsSet", "write_stats_txt", "write_stats_json", "write_stats_csv"]
