#!/usr/bin/env python3
"""Pack the finished points of a sweep into one compressed file, and unpack it into a sweep folder.

A long grid - the full DySHARP evaluation is tens of CPU-hours on two cores - may run over several
sittings on machines that do not keep their files between them. The archive keeps, for each
finished point, what resuming the sweep and writing a paper's report need: its `done.json` (the
overrides, the config digest and the sources digest the sweep's resume rule compares), its
`config.json` and a subset of its `stats.json` (the root stats and the groups the paper grids and
sweep tables read: `system.moe.*`, `system.block.*`, `system.cais.*`; `--stats` adds patterns).
Unpacked into `OUT/sweep/points/`, `moehub-sim sweep` and `moehub-sim paper` on the same code take
those points as finished (on other code their sources digest differs and they run again, as any
finished point of older code does). The full stats stay with the run: 10-30 MB a point.

    python tools/sweep_archive.py pack OUT/sweep ARCHIVE.json.gz         # finished points only
    python tools/sweep_archive.py unpack ARCHIVE.json.gz OUT/sweep       # keeps points already there
    python tools/sweep_archive.py list ARCHIVE.json.gz

Bad input (a folder that is not a sweep's, an archive that is not one) is a one-paragraph error,
exit status 2.
"""
import argparse
import fnmatch
import gzip
import json
import sys
from pathlib import Path

FORMAT = "moehub-arch sweep archive 1"
DONE = "done.json"      # as moehub_arch.sweep writes it: present once every file of a point is
DEFAULT_STATS = ("system.moe.*", "system.block.*", "system.cais.*")


class ArchiveError(Exception):
    pass


def _read_json(path, what):
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read the {what} ({e.strerror})") from None
    except ValueError as e:
        raise ArchiveError(f"{path}: the {what} is not valid JSON ({e})") from None


def _keep(name, patterns):
    # root stats (simTicks, hostSeconds, ...) have no dot; the groups are matched by pattern
    return "." not in name or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def pack(sweep_dir, archive, patterns=DEFAULT_STATS):
    """Write the finished points of `sweep_dir` (a sweep's output folder) to `archive`; returns
    the number of points packed."""
    points_dir = Path(sweep_dir) / "points"
    if not points_dir.is_dir():
        raise ArchiveError(f"{sweep_dir}: not a sweep's output folder (it has no points/ folder)")
    points = {}
    for d in sorted(points_dir.iterdir()):
        if not (d / DONE).is_file():
            continue                      # unfinished or failed: runs again after unpacking
        stats = _read_json(d / "stats.json", "point's stats")
        points[d.name] = {"done": _read_json(d / DONE, "point's done.json"),
                          "config": _read_json(d / "config.json", "point's config"),
                          "stats": {k: v for k, v in stats.items() if _keep(k, patterns)}}
    body = {"format": FORMAT, "stats_patterns": list(patterns), "points": points}
    with gzip.open(archive, "wt", encoding="utf-8") as f:
        json.dump(body, f, separators=(",", ":"), sort_keys=True)
    return len(points)


def load(archive):
    """The archive's contents ({format, stats_patterns, points}), checked."""
    try:
        with gzip.open(archive, "rt", encoding="utf-8") as f:
            body = json.load(f)
    except OSError as e:
        raise ArchiveError(f"{archive}: cannot read it as a gzip file ({e})") from None
    except ValueError as e:
        raise ArchiveError(f"{archive}: not valid JSON inside the gzip ({e})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ArchiveError(f"{archive}: not a sweep archive (expected format '{FORMAT}')")
    for pid, p in body.get("points", {}).items():
        if (not isinstance(p, dict) or set(p) != {"done", "config", "stats"}
                or "/" in pid or pid in ("", ".", "..")):
            raise ArchiveError(f"{archive}: point '{pid}' is malformed (expected done, config and "
                               "stats, and a plain folder name)")
    return body


def unpack(archive, sweep_dir):
    """Write the archive's points into `sweep_dir/points/`; a point already finished there is kept
    as it is. Returns (written, kept)."""
    body = load(archive)
    points_dir = Path(sweep_dir) / "points"
    written = kept = 0
    for pid, p in sorted(body["points"].items()):
        d = points_dir / pid
        if (d / DONE).is_file():
            kept += 1
            continue
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(p["config"], indent=1) + "\n")
        (d / "stats.json").write_text(json.dumps(p["stats"], indent=1) + "\n")
        (d / DONE).write_text(json.dumps(p["done"]))     # last, as the sweep writes it
        written += 1
    return written, kept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="write a sweep's finished points to an archive")
    p.add_argument("sweep_dir")
    p.add_argument("archive")
    p.add_argument("--stats", action="append", default=[], metavar="PATTERN",
                   help="also keep the stats matching this pattern (repeatable)")
    u = sub.add_parser("unpack", help="write an archive's points into a sweep folder")
    u.add_argument("archive")
    u.add_argument("sweep_dir")
    li = sub.add_parser("list", help="the archive's points")
    li.add_argument("archive")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "pack":
            n = pack(args.sweep_dir, args.archive, DEFAULT_STATS + tuple(args.stats))
            print(f"packed {n} finished points into {args.archive}")
        elif args.cmd == "unpack":
            written, kept = unpack(args.archive, args.sweep_dir)
            print(f"unpacked {written} points into {args.sweep_dir}/points"
                  + (f" ({kept} already finished there, kept)" if kept else ""))
        else:
            for pid, p in sorted(load(args.archive)["points"].items()):
                print(pid, " ".join(p["done"].get("overrides", [])),
                      "sources", p["done"].get("sources_digest", "?")[:12])
    except ArchiveError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
