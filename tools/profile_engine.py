#!/usr/bin/env python3
"""Profile the compiled run loop with Linux `perf`: which handler functions take the time.

    python tools/profile_engine.py configs/experiments/layer/deepseek_v3_1024_moehub.yaml \
        --set workload.layer.tokens_per_gpu=256

Numba's JIT code has no symbols perf can see. This script loads the engine in-process from the
package's Numba cache (the folder keyed by the source, moehub_arch/__init__.py: warm after any run
of the same code; `--cold` compiles it afresh in a private cache, the full cold compile time;
MOEHUB_PROFILE_CACHE names a cache folder of your own), runs the config under `perf record` with a
software clock, then writes /tmp/perf-PID.map (the JIT symbol-map format perf reads) from the
addresses LLVM gave every compiled function, and prints `perf report` by function. The addresses
come from each library's object code, which Numba hands over both when it compiles and when it
loads from the cache (keep_object_code), so both ways map the same functions. Functions LLVM
inlined into their callers are counted in the caller. Needs `perf` (Debian's linux-perf); hardware
counters are not required.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def _short(name):
    """'_ZN11moehub_arch10components2sm8sm_issueB2v5...' -> 'components.sm.sm_issue'."""
    prefix = "cpython." if name.startswith("_ZN7cpython") else ""
    i = len("_ZN7cpython") if prefix else 3
    if not name.startswith("_ZN"):
        return name[:80]
    parts = []
    while i < len(name) and name[i].isdigit():   # length-prefixed identifiers (Itanium mangling)
        j = i
        while name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
    if parts and parts[0] == "moehub_arch":
        parts = parts[1:]
    return prefix + ".".join(parts)


def _elf_functions(obj):
    """(name, size, section, offset, binding) of every defined function symbol in an ELF64
    little-endian object file (binding: STB_LOCAL 0, STB_GLOBAL 1, STB_WEAK 2)."""
    import struct
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for sh in sections:
        if sh[1] != 2:            # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]  # sh_link: its string table
        for off in range(sh[4], sh[4] + sh[5], sh[9]):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", obj, off)
            if st_info & 0xF != 2:  # STT_FUNC
                continue
            start = strtab[4] + st_name
            name = obj[start:obj.index(b"\0", start)].decode()
            out.append((name, st_size, st_shndx, st_value, st_info >> 4))
    return out


def _function_addresses(lib, obj):
    """(address, size, name) of every function in a library's object code: its offset in its
    section, placed by a global function of that section, whose address the JIT gives. Neither
    a local symbol (the callees the engine links in with internal linkage,
    engine/optimise_once.py) nor a weak one (which the JIT resolves to the first copy loaded,
    perhaps another library's) can be looked up by name."""
    funcs = _elf_functions(obj)
    base = {}
    for name, size, sec, value, binding in funcs:
        if binding == 1 and sec not in base:
            addr = lib.get_pointer_to_function(name)
            if addr:
                base[sec] = addr - value
    return [(base[sec] + value, size, name) for name, size, sec, value, _ in funcs if sec in base]


def engine_libraries():
    """The code libraries of the compiled engine: the run loop's and the handlers' entry points'
    (dispatch/indirect.py), each holding every function compiled into it."""
    from moehub_arch.dispatch import indirect, loop
    return ([cres.library for cres in loop.run_loop.overloads.values()]
            + [entry._library for entry in indirect._ENTRIES.values()])


def write_perf_map(libraries):
    """Write /tmp/perf-<pid>.map for every function compiled into `libraries` (from the
    object code's symbol table, so it works for code loaded from Numba's cache as well)."""
    entries = []
    for lib in libraries:
        obj = getattr(lib, "_profiled_object", None) or lib._compiled_object
        if obj is None:
            continue
        for addr, size, name in _function_addresses(lib, obj):
            entries.append((addr, size, _short(name)))
    entries.sort()
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as out:
        for addr, size, name in entries:
            out.write(f"{addr:x} {max(size, 1):x} {name}\n")
    return len(entries)


def _dump_code(libraries, path):
    """Save the machine code of every mapped function (address, bytes) for --annotate."""
    import ctypes
    import pickle
    entries = []
    for lib in libraries:
        obj = getattr(lib, "_profiled_object", None) or lib._compiled_object
        for addr, size, name in (_function_addresses(lib, obj) if obj else []):
            if size:
                entries.append((addr, _short(name), ctypes.string_at(addr, size)))
    with open(path, "wb") as f:
        pickle.dump(entries, f)


def annotate(data, top):
    """Hottest instructions of the profile, with their disassembly (objdump) and neighbours."""
    import collections
    import pickle
    with open(data + ".code", "rb") as f:
        code = pickle.load(f)
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip"], capture_output=True,
                         text=True).stdout.split()
    ips = collections.Counter(int(x, 16) for x in out)
    total = sum(ips.values())
    for addr, name, blob in code:
        hits = {ip: n for ip, n in ips.items() if addr <= ip < addr + len(blob)}
        share = sum(hits.values()) / total
        if share < 0.05:
            continue
        with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
            f.write(blob)
        dis = subprocess.run(["objdump", "-D", "-b", "binary", "-m", "i386:x86-64",
                              f"--adjust-vma={addr:#x}", f.name], capture_output=True, text=True)
        lines = {}
        for line in dis.stdout.splitlines():
            head = line.split(":")[0].strip()
            try:
                lines[int(head, 16)] = line
            except ValueError:
                pass
        order = sorted(lines)
        print(f"== {name}: {share:.1%} of samples")
        for ip, n in sorted(hits.items(), key=lambda x: -x[1])[:top]:
            print(f"{n / total:6.2%}  {lines.get(ip, hex(ip))}")


def _fail(message, status):
    print(f"profile_engine: error: {message}", file=sys.stderr)
    sys.exit(status)


def keep_object_code():
    """Keep every code library's object code (Numba drops it once the code is loaded), which
    write_perf_map reads; call it before the engine is compiled or loaded from the cache."""
    from numba.core.codegen import JITCodeLibrary
    keep = JITCodeLibrary._set_compiled_object
    if getattr(keep, "keeps_object_code", False):
        return

    def keep_object(self, value):
        self._profiled_object = value
        return keep(self, value)
    keep_object.keeps_object_code = True
    JITCodeLibrary._set_compiled_object = keep_object


def _choose_cache(cold):
    """Set NUMBA_CACHE_DIR before moehub_arch is imported: a fresh private folder for `cold`,
    MOEHUB_PROFILE_CACHE if set, else leave it to the package (its source-keyed folder, or the
    user's own NUMBA_CACHE_DIR). Returns what to print."""
    if cold:
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="moehub-prof-")
        return "compiling the engine (cold, private cache)..."
    if os.environ.get("MOEHUB_PROFILE_CACHE"):
        os.environ["NUMBA_CACHE_DIR"] = os.environ["MOEHUB_PROFILE_CACHE"]
    import moehub_arch  # noqa: F401 (sets NUMBA_CACHE_DIR to the source-keyed folder if unset)
    return (f"loading the engine from {os.environ['NUMBA_CACHE_DIR']} "
            "(compiled there first if this code has not run yet)...")


def run_profiled(config, overrides, data, top, cold=False):
    what = _choose_cache(cold)
    import signal
    import time
    keep_object_code()
    from moehub_arch.components.scheduler import schedule_initial_launches
    from moehub_arch.config import load_config
    from moehub_arch.dispatch import loop
    from moehub_arch.dispatch.precompile import EngineCompile
    from moehub_arch.engine.stateref import state_ref
    from moehub_arch.errors import exit_code, user_errors
    from moehub_arch.simulation import Simulation
    if shutil.which("perf") is None:
        _fail("needs Linux `perf` on the PATH (Debian's package linux-perf)", 2)
    try:
        sim = Simulation(load_config(config, overrides))
    except user_errors() as e:      # bad config: one paragraph, no traceback
        _fail(str(e), exit_code(e))
    print(what, file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    ref = state_ref(sim.state)
    schedule_initial_launches(ref)   # sim.run() does it again only for a fresh state:
    entries, _ = EngineCompile(sim.state, (0, 0, -1)).finish()
    loop.run_loop(ref, 0, 0, -1, entries)     # here it just compiles or loads the engine
    sim = Simulation(load_config(config, overrides))
    print(f"engine ready in {time.perf_counter() - t0:.0f} s; profiling the run", file=sys.stderr)
    perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-o", data,
                             "-p", str(os.getpid())], stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    stats = sim.run()
    perf.send_signal(signal.SIGINT)
    perf.wait()
    n = write_perf_map(engine_libraries())
    _dump_code(engine_libraries(), data + ".code")
    print(f"profiled {stats['simEvents']} events in {stats['hostSeconds']:.2f} s "
          f"({stats['hostEventRate'] / 1e6:.2f} M events/s); {n} compiled functions mapped",
          file=sys.stderr)
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "sym",
                          "--stdio"], capture_output=True, text=True)
    lines = [l for l in rep.stdout.splitlines() if l.strip() and not l.startswith("#")]
    print("\n".join(lines[:top]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--data", default="/tmp/moehub-perf.data")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--annotate", action="store_true",
                    help="also print the hottest instructions of functions with >= 5%% of samples")
    ap.add_argument("--cold", action="store_true",
                    help="compile the engine afresh in a private Numba cache (the full cold "
                         "compile) instead of loading it from the package's cache")
    args = ap.parse_args(argv)
    run_profiled(args.config, args.overrides, args.data, args.top, cold=args.cold)
    if args.annotate:
        annotate(args.data, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
