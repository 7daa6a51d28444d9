"""gem5-style periodic stat dumps (`stats.dump_period`).

Every period the run pauses at that exact simulated tick and the stats as they are then (counters
are cumulative since the start, as gem5's without a reset; rates and utilisations are over the
time so far) are appended to ``stats_dumps.txt`` as one Begin/End block each, and to
``stats_dumps.csv`` in long format with the dump tick (``tick,name,value,unit``) for plotting.
Off (no observer, nothing paused) when the period is 0. Both files are written as NAME.partial
and renamed when the run closes them (outputs.py).
"""
import csv
import os

from ..outputs import partial_path, writing

from ..observer import RunObserver
from .collect import collect_stats
from .dump import format_stats_txt


class PeriodicDump(RunObserver):
    def __init__(self, period, outdir):
        self.period = period
        self.txt_path = outdir / "stats_dumps.txt"
        self.csv_path = outdir / "stats_dumps.csv"
        self.next = period
        self.dumps = 0

    def on_start(self, sim):
        with writing(self.txt_path, "stats dump file"):
            self.txt = partial_path(self.txt_path).open("w")
        with writing(self.csv_path, "stats dump file"):
            self.csv_file = partial_path(self.csv_path).open("w", newline="")
            self.csv = csv.writer(self.csv_file)
            self.csv.writerow(["tick", "name", "value", "unit"])

    def next_stop(self, sim):
        return self.next

    def on_pause(self, sim, tick, events, wall_seconds):
        if sim.exact_tick != self.next:
            return
        stats = collect_stats(sim.state, sim.launches, sim.program, wall_seconds, 0.0,
                              sim_ticks=tick)
        with writing(self.txt_path, "stats dump file"):
            self.txt.write(format_stats_txt(stats))
        with writing(self.csv_path, "stats dump file"):
            for s in stats:
                if not s.name.startswith("host"):
                    self.csv.writerow([tick, s.name, s.value, s.unit])
        self.dumps += 1
        self.next += self.period

    def on_finish(self, sim):
        for f, path in ((self.txt, self.txt_path), (self.csv_file, self.csv_path)):
            with writing(path, "stats dump file"):
                f.close()
                os.replace(partial_path(path), path)
