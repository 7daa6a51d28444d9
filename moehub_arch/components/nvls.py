"""NVLink SHARP (NVLS): the NVSwitch's multicast and reduction engine, driven by multimem instructions.

Hopper's third-generation NVSwitch executes the PTX multimem instructions on *multicast objects*: a
group of GPUs with memory bound at the same offsets (cuMulticastCreate, cuMulticastAddDevice,
cuMulticastBindMem), addressed through one multimem address (NVIDIA Hopper architecture
whitepaper, NVSwitch and NVLink SHARP sections; PTX ISA manual, multimem.ld_reduce / multimem.st /
multimem.red; CUDA driver API, multicast object management). Here an object is built from the
config (workload.multicast: a symmetric buffer and its member GPUs), and a multimem address is the
buffer's own address, which names the same byte on every member.

- multimem.st / multimem.red (packet kind PK_MM_ST): the source hub sends each chunk (a put-sized
  packet) once, up to a switch; the switch sends one copy (PK_MM_COPY) down to every member, the
  source included, as soon as that member's output queue has room (the packet holds its input
  port until every copy is out: head-of-line, like any packet waiting for an output). A member
  writes (st) or adds (red: fp32 arithmetic, rounded to the element type) the copy into its
  memory, and answers the source with one write response once it has every chunk of the
  operation; the source's fence completes when every member has answered. Assumption: the
  switch does not merge the members' write responses (NVIDIA publishes nothing on it; they are
  header-only and one per member and operation).
- multimem.ld_reduce (PK_MM_LD, a header-only request per chunk): the switch reserves a
  reduction-buffer entry at the source's input port (system.switch.nvls.reduction_buffer_bytes
  per port, reserved in store-packet lines; a full buffer blocks the port's request channel
  until an entry frees: back-pressure, nothing dropped), sends a read (PK_MM_READ) to every
  member, and adds the members' values (PK_MM_DATA, response channel) as they arrive; the last
  one completes the entry, which frees its space, and the result (PK_MM_RESULT) goes to the
  source in the response channel. A member's read holds its receive-buffer space until its data
  leaves (so reads cannot outrun the member's up link). Assumption: the switch's adders keep
  pace with the links (no reduction cost beyond the traversal): NVIDIA publishes no rate.
  The protocol is deadlock-free because the members' data and the results travel in NVLink's
  response channel (system.nvlink.response_path: separate); with `shared` they queue behind
  requests, a member's held reads wait for room that data behind them needs, and small buffers
  deadlock (the stuck-run report shows it).

Functional mode: st copies the source's bytes when a copy is delivered (like a put); red adds
them; ld_reduce's result is computed when it reaches the source, as FP32 accumulation over the
members in rank order (acc = x_m0; acc = fp32(acc + x_m1); ...), rounded once to the element
type - the order the NumPy reference (workloads/reference.nvls_reduce_reference) follows. The
hardware adds in arrival order, which NVIDIA does not specify; a fixed order keeps runs
bit-identical and checkable. Reading the members' values at the result's arrival rather than
when each member answered differs only if a program writes the range while a ld_reduce of it is
in flight, which PTX leaves undefined.

Traffic saved (stats up_saved_bytes / down_saved_bytes of the source's switch port), against the
same operation made of unicast packets through the switch to every member (the source included):
a multicast chunk of W wire bytes to m members saves (m - 1) W on the source's uplink; a
ld_reduce chunk saves (m - 1) read headers on the uplink and (m - 1) data packets on the
downlink. The members' own links carry the same bytes either way.
"""
import numpy as np
from ..engine.jit import compiled

from ..isa.encoding import DT_BF16, DT_NONE, MM_RED, SEM_MULTIMEM
from .elements import load_f32, store_f32
from .hbm import hbm_backed, raise_error
from .nvlink import credit_return_vc, input_free_tick, txq_push
from .link_room import pick_switch_output
from .packet import (PK_MM_COPY, PK_MM_DATA, PK_MM_LD, PK_MM_READ, PK_MM_RESULT,
                     PK_MM_ST, REQ_MM_LD, REQ_MM_RED, REQ_MM_ST, VC_REQUEST, packet_alloc,
                     packet_flits, packet_free, packet_vc, request_records)
from .read_data import answer_read, queue_read_data
from .wakeups import unblock_request_port
from ..config.keys import key_param
from ..declare import (Array, Block, Crossing, Param, Receive, Record, Semantic, Send, Stat,
                       StatGroup, counters, fields)
from ..engine.state import ERR_UNBACKED_COPY
from .dysharp import ext_flits, targets_on_gpu
from .dysharp_objects import (OBJ_BASE, OBJ_BYTES, OBJ_COLUMNS, OBJ_DONE, OBJ_JOBS, OBJ_LTILES,
                              OBJ_MEMBERS, OBJ_ROWB, OBJ_TILE, OBJ_TILEB, OBJ_TPG, OBJ_TRACK,
                              tracked_tiles)

NVLS_SENT = -1          # nvls_fanout: every member has its copy (or read): the packet is consumed
NVLS_BUFFER_FULL = -2   # nvls_fanout: the port's reduction buffer has no room for the entry


def _line(cfg):
    """Reduction-buffer allocation unit: one store packet's payload (packet.py)."""
    return min(cfg.system.nvlink.store_packet_bytes, cfg.system.nvlink.max_payload_bytes)


def _on(cfg):
    return len(cfg.workload.multicast) > 0


def _entries(cfg):
    """Reduction-buffer entries of all switch input ports (each entry takes at least a line)."""
    if not _on(cfg):
        return 0
    ports = cfg.system.num_gpus * cfg.system.nvlink.links_per_gpu
    return ports * max(1, cfg.system.switch.nvls.reduction_buffer_bytes // _line(cfg))


def multicast_object_rows(cfg, buffers):
    """Rows of State.mm_objects (base, bytes, members, then DySHARP's columns) and each object's
    member GPUs (the rows of State.mm_member) from workload.multicast and the laid-out buffers;
    raises ValueError naming the key for a bad object."""
    G = cfg.system.num_gpus
    rows, members = [], []
    for i, o in enumerate(cfg.workload.multicast):
        where = f"workload.multicast[{i}]"
        if o.buffer not in buffers:
            raise ValueError(f"{where}.buffer: no buffer '{o.buffer}' (workload.buffers: "
                             f"{', '.join(sorted(buffers)) or 'none'})")
        gpus = sorted(set(o.gpus)) if o.gpus else list(range(G))
        bad = [g for g in gpus if g >= G]
        if bad:
            raise ValueError(f"{where}.gpus: GPU(s) {bad} out of range (system.num_gpus = {G})")
        if len(gpus) < 2:
            raise ValueError(f"{where}.gpus: a multicast object needs at least two member GPUs, "
                             f"found {gpus}")
        b = buffers[o.buffer]
        dyn = (0,) * 18
        if o.targets_per_gpu > 0:
            dyn = _dynamic_columns(cfg, o, where, buffers, b) + _ready_columns(o, where, buffers)
        elif o.ready_words:
            raise ValueError(f"{where}.ready_words: a ready queue belongs to a dynamic object "
                             f"(targets_per_gpu > 0)")
        rows.append((b.addr, b.nbytes, len(gpus)) + dyn)
        members.append(gpus)
    named = [o.ready_words for o in cfg.workload.multicast if o.ready_words]
    if len(named) != len(set(named)):
        raise ValueError("workload.multicast[].ready_words: two objects name the same ready words "
                         "(each token would be queued twice): name them on one object")
    return _tracked_tile_bytes(cfg, rows), members


def _ready_columns(o, where, buffers):
    """Columns OBJ_RWORDS .. OBJ_RQUEUE of a dynamic object (dysharp_ready.py); ValueError naming
    the key for a bad one."""
    if not o.ready_words:
        if o.ready_queue or o.ready_count:
            raise ValueError(f"{where}.ready_words: ready_queue and ready_count need ready_words")
        return (0, 0, 0, 0)
    if o.ready_count < 1 or not o.ready_queue:
        raise ValueError(f"{where}: ready_words '{o.ready_words}' needs ready_count (words per "
                         f"token, at least 1; found {o.ready_count}) and ready_queue")
    for key in ("ready_words", "ready_queue"):
        name = getattr(o, key)
        if name not in buffers or buffers[name].region != "control":
            raise ValueError(f"{where}.{key}: no control-region buffer '{name}' "
                             f"(workload.buffers: {', '.join(sorted(buffers)) or 'none'})")
    words, queue = buffers[o.ready_words], buffers[o.ready_queue]
    tokens = words.nbytes // (8 * o.ready_count)
    if tokens < 1 or queue.nbytes < 8 * tokens:
        raise ValueError(f"{where}.ready_queue: buffer '{o.ready_queue}' ({queue.nbytes} bytes) "
                         f"must hold one i64 per token of '{o.ready_words}' ({tokens} tokens of "
                         f"{o.ready_count} words)")
    return (words.addr + 1, o.ready_count, tokens, queue.addr)


def _tracked_tile_bytes(cfg, rows):
    """Column OBJ_TILEB of tracked dynamic objects: the bytes that make a row tile complete, its
    rows' bytes in every object naming the same tracker (a token's row and its meta row both
    land before its tile may start); the objects sharing a tracker must share its geometry."""
    by = {}
    for i, r in enumerate(rows):
        if r[OBJ_TRACK]:
            by.setdefault(r[OBJ_TRACK], []).append(i)
    for track, members in by.items():
        first = rows[members[0]]
        for i in members:
            if (rows[i][OBJ_TPG], rows[i][OBJ_TILE], rows[i][OBJ_LTILES]) != (
                    first[OBJ_TPG], first[OBJ_TILE], first[OBJ_LTILES]):
                raise ValueError(
                    f"workload.multicast[{i}].tracker: '{cfg.workload.multicast[i].tracker}' is "
                    f"shared with workload.multicast[{members[0]}], whose targets_per_gpu, "
                    f"tile_rows or layout tiles differ: one tile-ready word per tile")
            if rows[i][OBJ_DONE:OBJ_JOBS + 1] != first[OBJ_DONE:OBJ_JOBS + 1]:
                raise ValueError(
                    f"workload.multicast[{i}].done_counters: '{cfg.workload.multicast[i].tracker}'"
                    f" is shared with workload.multicast[{members[0]}], whose done_counters, "
                    f"done_offset, done_stride or done_jobs differ: one entry per tile")
        full = first[OBJ_TILE] * sum(rows[i][OBJ_ROWB] for i in members)
        for i in members:
            rows[i] = rows[i][:OBJ_TILEB] + (full,) + rows[i][OBJ_TILEB + 1:]
    return rows


def _dynamic_columns(cfg, o, where, buffers, b):
    """Columns OBJ_TPG .. OBJ_LCAP of a DySHARP dynamic object (dysharp.py; OBJ_TILEB is filled
    in by _tracked_tile_bytes); ValueError naming the key for a bad one."""
    if o.row_bytes <= 0 or o.rows <= 0:
        raise ValueError(f"{where}: a dynamic object (targets_per_gpu > 0) needs row_bytes and "
                         f"rows above 0, found row_bytes {o.row_bytes}, rows {o.rows}")
    layout_rows = b.nbytes // (o.targets_per_gpu * o.row_bytes)
    if layout_rows < 1:
        raise ValueError(f"{where}.buffer: '{o.buffer}' ({b.nbytes} bytes) holds no layout row of "
                         f"{o.row_bytes} bytes for each of {o.targets_per_gpu} targets")
    if o.layout_rows > layout_rows:
        raise ValueError(f"{where}.layout_rows: {o.layout_rows} rows per target do not fit buffer "
                         f"'{o.buffer}' ({b.nbytes} bytes: {layout_rows} rows of {o.row_bytes} "
                         f"bytes for each of {o.targets_per_gpu} targets)")
    lcap = o.layout_rows or layout_rows
    need = {"counts": o.targets_per_gpu * 8, "al_table": o.rows * o.targets_per_gpu * 8}
    addr = {}
    for key, nbytes in need.items():
        name = getattr(o, key)
        if name not in buffers:
            raise ValueError(f"{where}.{key}: no buffer '{name}' (workload.buffers: "
                             f"{', '.join(sorted(buffers)) or 'none'})")
        if buffers[name].nbytes < nbytes or buffers[name].region != "control":
            raise ValueError(f"{where}.{key}: buffer '{name}' must be a control-region buffer of "
                             f"at least {nbytes} bytes, found {buffers[name].nbytes} bytes in "
                             f"region {buffers[name].region}")
        addr[key] = buffers[name].addr
    track = tile_rows = ltiles = 0
    if o.tracker:
        # the token tracker (token-centric fusion): one tile-ready word per row tile
        if o.tile_rows < 1:
            raise ValueError(f"{where}.tile_rows: a tracked dynamic object (tracker "
                             f"'{o.tracker}') needs tile_rows of at least 1, found {o.tile_rows}")
        tile_rows = o.tile_rows
        ltiles = -(-lcap // tile_rows)
        need = ltiles * o.targets_per_gpu
        if o.tracker not in buffers:
            raise ValueError(f"{where}.tracker: no buffer '{o.tracker}' (workload.buffers: "
                             f"{', '.join(sorted(buffers)) or 'none'})")
        t = buffers[o.tracker]
        if t.nbytes < need * 8 or t.region != "control":
            raise ValueError(f"{where}.tracker: buffer '{o.tracker}' must be a control-region "
                             f"buffer of at least {need * 8} bytes (one word per row tile), found "
                             f"{t.nbytes} bytes in region {t.region}")
        entries = cfg.system.switch.nvls.dysharp.tracker_tiles
        if need > tracked_tiles(cfg):
            raise ValueError(f"{where}: internal: {need} tracked tiles, the tile arrays hold "
                             f"{tracked_tiles(cfg)}")
        if not o.done_counters and need > entries:
            raise ValueError(
                f"{where}: its receive layouts have {need} row tiles ({o.targets_per_gpu} "
                f"targets x {ltiles} tiles of {tile_rows} rows: layout_rows {lcap}) and the token "
                f"tracker's tile table holds {entries} "
                f"(system.switch.nvls.dysharp.tracker_tiles): without done_counters the tracker "
                f"cannot free a tile's entry, so every tile needs one at once; raise "
                f"tracker_tiles or tile_rows, lower layout_rows, or name done_counters")
        if o.done_counters and o.targets_per_gpu > entries:
            raise ValueError(
                f"{where}: {o.targets_per_gpu} targets per GPU and the token tracker's tile table "
                f"holds {entries} entries (system.switch.nvls.dysharp.tracker_tiles): the "
                f"tracker keeps one entry per target for its head tile (with fewer, each "
                f"target's partial tile can keep its entry until every source's rows are in "
                f"while full tiles wait for entries), so the table needs at least one entry per "
                f"target; raise tracker_tiles")
        track = t.addr + 1
    done = dstride = jobs = 0
    if o.tracker and o.done_counters:
        if o.done_counters not in buffers:
            raise ValueError(f"{where}.done_counters: no buffer '{o.done_counters}' "
                             f"(workload.buffers: {', '.join(sorted(buffers)) or 'none'})")
        if o.done_stride < 8 or o.done_stride % 8 or o.done_offset % 8 or o.done_jobs < 1:
            raise ValueError(f"{where}: done_stride ({o.done_stride}) and done_offset "
                             f"({o.done_offset}) must be multiples of 8 with done_stride at least "
                             f"8, and done_jobs ({o.done_jobs}) at least 1")
        d = buffers[o.done_counters]
        end = o.done_offset + (ltiles * o.targets_per_gpu - 1) * o.done_stride + 8
        if d.nbytes < end or d.region != "control":
            raise ValueError(f"{where}.done_counters: buffer '{o.done_counters}' must be a "
                             f"control-region buffer of at least {end} bytes (a counter per row "
                             f"tile at done_offset + tile x done_stride), found {d.nbytes} bytes "
                             f"in region {d.region}")
        done, dstride, jobs = d.addr + o.done_offset + 1, o.done_stride, o.done_jobs
    return (o.targets_per_gpu, o.row_bytes, o.rows, layout_rows, addr["counts"], addr["al_table"],
            track, tile_rows, 0, ltiles, lcap, done, dstride, jobs)


def check_buffer_size(cfg):
    """The reduction buffer must hold one ld_reduce chunk; returns an error text or ''."""
    chunk = _line(cfg) * cfg.run.packet_train
    size = cfg.system.switch.nvls.reduction_buffer_bytes
    if size < chunk:
        return (f"system.switch.nvls.reduction_buffer_bytes: {size} bytes cannot hold one "
                f"multimem.ld_reduce entry of {chunk} bytes (system.nvlink.store_packet_bytes x "
                f"run.packet_train): every switch port needs at least that much")
    return ""


def check_nvls(sim, out):
    """Every multicast copy delivered, every read answered, every reduction completed and its
    buffer space freed."""
    st = sim.state
    if int(st.p[0].mm_objects) == 0:
        return
    ch, gp = st.ch, st.gpu
    out.equal("multimem st/red packets reaching the switches vs sent by the hubs",
              ch.mm_in_st.sum(), gp.mm_tx_st.sum())
    out.equal("multicast copies delivered to members vs made by the switches",
              gp.mm_copies_rx.sum(), ch.mm_copies.sum())
    out.equal("multimem ld_reduce requests reaching the switches vs sent by the hubs",
              ch.mm_in_ld.sum(), gp.mm_tx_ld.sum())
    out.equal("reduction reads received by members vs sent by the switches",
              gp.mm_reads_rx.sum(), ch.mm_reads.sum())
    out.equal("reduction data sent by members vs reads received (+ one per further DySHARP "
              "target)", gp.mm_data_tx.sum(), gp.mm_reads_rx.sum() + gp.dy_data_extra.sum())
    out.equal("reduction data reaching the switches vs sent by members", ch.mm_data_in.sum(),
              gp.mm_data_tx.sum())
    out.equal("reduction results received vs reductions completed", gp.mm_results_rx.sum(),
              ch.mm_reductions_pk.sum())
    out.equal("reduction-buffer entries free at the end (of all ports)",
              int(st.sys[0].mm_free_top), st.mm_free.shape[0] if _entries_built(st) else 0)
    name = lambda c: f"system.switch{int(ch.switch[c])}.port{int(ch.port[c])}"   # noqa: E731
    out.empty(ch.mm_used, "reduction-buffer bytes still reserved", name, " bytes")
    out.empty(gp.mm_rdq_count, "switch reads still held by GPUs",
              lambda g: f"system.gpu{g}", " read(s)")
    out.check(st.mm_arrived == 0, "multicast writes not answered",
              lambda i: f"request {i // st.mm_arrived.shape[1]} at GPU {i % st.mm_arrived.shape[1]}")


def _entries_built(st):
    return int(st.p[0].mm_entries) > 0


def nvls_findings(sim):
    """Ports whose ld_reduce waits for reduction-buffer room (the stuck-run report)."""
    st = sim.state
    out = []
    for c in range(st.ch.shape[0]):
        ch = st.ch[c]
        if ch.to_switch and ch.mm_wait:
            out.append(f"system.switch{int(ch.switch)}.port{int(ch.port)}: multimem.ld_reduce waits "
                       f"for reduction-buffer room ({int(ch.mm_used)} of "
                       f"{int(st.p[0].mm_buffer_bytes)} bytes reserved; "
                       f"system.switch.nvls.reduction_buffer_bytes)")
    return out


@compiled
def nvls_start(st):
    """Every reduction-buffer entry starts free."""
    n = st.p[0].mm_entries
    for i in range(n):
        st.mm_free[i] = n - 1 - i
    st.sys[0].mm_free_top = n


def _stats_on(st):
    return int(st.p[0].mm_objects) > 0


def _sum(field):
    return lambda i: int(i.st.ch[field].sum())


BLOCK = Block(
    "nvls", __doc__.split("\n\n")[0],
    params=(
        key_param("mm_buffer_bytes", "system.switch.nvls.reduction_buffer_bytes"),
        Param("mm_objects", "workload.multicast", "objects", "multicast objects",
              lambda cfg: len(cfg.workload.multicast), "config: workload.multicast"),
        Param("mm_entries", "", "entries", "reduction-buffer entries of all ports", _entries,
              "derived: ports x reduction_buffer_bytes / store packet payload"),
    ),
    records=(Record("mm_entry", "reduction-buffer entries (ld_reduce chunks in the switch)",
                    count=_entries),),
    arrays=(Array("mm_objects", "multicast objects: base, bytes, members, DySHARP's columns "
                  "(builder)", lambda cfg: (max(1, len(cfg.workload.multicast)), OBJ_COLUMNS)),
            # one flag per (object, GPU) rather than a bit mask in one word: a mask word would
            # stop at 62 GPUs, below a 72-GPU NVLink domain (GB200 NVL72)
            Array("mm_member", "multicast objects' member GPUs (1: member; builder)",
                  lambda cfg: (max(1, len(cfg.workload.multicast)), cfg.system.num_gpus)),
            Array("mm_free", "free reduction-buffer entries (a stack; sys.mm_free_top)",
                  lambda cfg: (max(1, _entries(cfg)),)),
            Array("mm_arrived", "multicast chunks of request r a member has received",
                  lambda cfg: ((cfg.system.num_gpus * request_records(cfg),
                                cfg.system.num_gpus) if _on(cfg) else (1, 1))),
            Array("mm_visible", "when those chunks are visible in the member's memory",
                  lambda cfg: ((cfg.system.num_gpus * request_records(cfg),
                                cfg.system.num_gpus) if _on(cfg) else (1, 1)))),
    fields=fields("mm_entry", ("src_gpu", "GPU that asked"), ("req", "its hub request"),
                  ("port", "input channel whose buffer holds the entry"),
                  ("pending", "members whose values are still to come"),
                  ("bytes", "buffer bytes reserved"), ("chunk", "payload bytes"),
                  ("obj", "multicast object"), ("elem", "element type (DT_*)"),
                  ("local", "result address at the source"), ("mm_addr", "multimem address"))
    + fields("pk", ("mm_obj", "multicast object (multimem packets)"),
             ("mm_op", "MM_ST or MM_RED (PK_MM_ST, PK_MM_COPY)"), ("mm_dtype", "element type"),
             ("mm_entry", "reduction entry (PK_MM_LD once admitted, PK_MM_READ, PK_MM_DATA)"),
             ("mm_sent", "members served so far (fan-out progress of the head packet)"))
    + fields("ch", ("mm_used", "reduction-buffer bytes reserved at this input port"),
             ("mm_peak", ""), ("mm_wait", "1: the head ld_reduce waits for buffer room"),
             ("mm_wait_since", ""), ("mm_wait_ticks", ""), ("mm_in_st", ""), ("mm_in_ld", ""),
             ("mm_copies", ""), ("mm_reads", ""), ("mm_data_in", ""), ("mm_reductions", ""),
             ("mm_reductions_pk", ""), ("mm_up_saved", ""), ("mm_down_saved", ""))
    + fields("gpu", ("mm_tx_st", ""), ("mm_tx_ld", ""), ("mm_copies_rx", ""), ("mm_reads_rx", ""),
             ("mm_data_tx", ""), ("mm_results_rx", ""))
    + fields("sys", ("mm_free_top", "free reduction-buffer entries")),
    stats=(
        StatGroup("switch_port", "nvls", (
            Stat("multicast_packets", "packets", "multimem.st/red packets from this port's GPU",
                 lambda i: i.rx.mm_in_st),
            Stat("multicast_copies", "packets", "copies the switch sent to the members for them "
                 "(fan-out)", lambda i: i.rx.mm_copies),
            Stat("reduce_requests", "packets", "multimem.ld_reduce request packets from this "
                 "port's GPU", lambda i: i.rx.mm_in_ld),
            Stat("reductions", "count", "ld_reduce entries completed for this port's GPU",
                 lambda i: i.rx.mm_reductions),
            Stat("buffer_peak_bytes", "bytes", "peak reduction-buffer bytes reserved "
                 "(system.switch.nvls.reduction_buffer_bytes)", lambda i: i.rx.mm_peak),
            Stat("buffer_stall_ticks", "ps", "time the port's head ld_reduce waited for "
                 "reduction-buffer room", lambda i: i.rx.mm_wait_ticks),
            Stat("up_saved_bytes", "bytes", "wire bytes the GPU's uplink did not carry, against "
                 "unicast packets to every member", lambda i: i.rx.mm_up_saved),
            Stat("down_saved_bytes", "bytes", "wire bytes the GPU's downlink did not carry, "
                 "against unicast reads of every member", lambda i: i.rx.mm_down_saved),
        ), enabled=_stats_on),
        StatGroup("system", "nvls", (
            Stat("multicast_packets", "packets", "multimem.st/red packets into the switches",
                 _sum("mm_in_st")),
            Stat("multicast_copies", "packets", "copies sent to members", _sum("mm_copies")),
            Stat("multicast_fanout", "ratio", "copies per multicast packet",
                 lambda i: (int(i.st.ch.mm_copies.sum()) / int(i.st.ch.mm_in_st.sum()))
                 if int(i.st.ch.mm_in_st.sum()) else 0.0),
            Stat("reductions", "count", "ld_reduce entries completed", _sum("mm_reductions")),
            Stat("buffer_peak_bytes", "bytes", "largest peak of any port's reduction buffer",
                 lambda i: int(i.st.ch.mm_peak.max())),
            Stat("up_saved_bytes", "bytes", "uplink wire bytes saved (all ports)",
                 _sum("mm_up_saved")),
            Stat("down_saved_bytes", "bytes", "downlink wire bytes saved (all ports)",
                 _sum("mm_down_saved")),
        ), enabled=_stats_on),
        StatGroup("gpu", "nvls", counters((
            ("multimem_packets", "mm_tx_st", "packets", "multimem.st/red packets sent to a switch"),
            ("reduce_requests", "mm_tx_ld", "packets", "multimem.ld_reduce request packets sent"),
            ("copies_received", "mm_copies_rx", "packets", "multicast copies written (or added) here"),
            ("reads_served", "mm_reads_rx", "packets", "switch reads of this GPU's values"),
            ("results_received", "mm_results_rx", "packets", "reduced results received"),
        )), enabled=_stats_on),
    ),
    checks=(check_nvls,),
    findings=(nvls_findings,),
    start=(nvls_start,),
    receives=(Receive((PK_MM_COPY, PK_MM_READ, PK_MM_RESULT), "components.nvls_gpu.receive_multimem",
                      "a multicast copy, a reduction read or a reduced result reaches a member"),),
    sends=(Send((REQ_MM_ST, REQ_MM_RED, REQ_MM_LD), "components.nvls_send.multimem_send",
                "multimem.st / red data chunks and ld_reduce requests, GPU -> switch"),),
    crossings=(Crossing((PK_MM_ST, PK_MM_LD), "components.nvls.nvls_fanout",
                        "the switch's engine copies a multimem store to the members or reads "
                        "them for a reduction"),
               Crossing((PK_MM_DATA,), "components.nvls.nvls_absorb", "a member's values are "
                        "added into their reduction entry as they arrive", arrival=True)),
    semantics=(Semantic((SEM_MULTIMEM,), "components.nvls_gpu.multimem",
                        "multimem.st / red / ld_reduce (and DySHARP's dymultimem)"),),
    # its handlers are compiled only for a run with a multicast object or a multimem instruction
    # (dispatch/indirect.py)
    on_demand=_stats_on,
)


@compiled
def multimem_object(st, g, addr, nbytes):
    """The multicast object that holds [addr, addr + nbytes) and has GPU g as a member; -1 if none."""
    for k in range(st.p[0].mm_objects):
        o = st.mm_objects[k]
        if (o[OBJ_TPG] == 0 and addr >= o[OBJ_BASE] and addr + nbytes <= o[OBJ_BASE] + o[OBJ_BYTES]
                and st.mm_member[k, g]):
            return k
    return -1


@compiled
def multimem_route_peer(st, k, g):
    """A member of object k other than g: the source hub picks its link as for a packet to it
    (in a single-level fabric every switch reaches every member)."""
    for m in range(st.p[0].num_gpus):
        if m != g and st.mm_member[k, m]:
            return m
    return g


@compiled
def multimem_members(st, k):
    return st.mm_objects[k, OBJ_MEMBERS]


# ------------------------------------------------------------------------------ the switch
@compiled
def nvls_fanout(st, c, pkt, tick):
    """The head packet of switch input c is a multimem st/red (PK_MM_ST) or ld_reduce request
    (PK_MM_LD): send a copy (or a read) to every member whose output queue has room, in member
    order, from where the last attempt stopped. Returns NVLS_SENT once every member is served (the
    packet is consumed), NVLS_BUFFER_FULL when a ld_reduce finds no reduction-buffer room at this
    port, or the member whose output queue is full (the input waits for it)."""
    p = st.p[0]
    ch = st.ch[c]
    pk = st.pk[pkt]
    if pk.kind == PK_MM_LD and pk.mm_entry < 0:
        if not _entry_alloc(st, c, pkt, tick):
            return NVLS_BUFFER_FULL
    k = pk.mm_obj
    dyn = st.mm_objects[k, OBJ_TPG] > 0
    # DySHARP (dysharp.py): one copy (or read) per GPU holding a target, its list trimmed to them
    ntargets = st.req[pk.req].dy_count if dyn else 0
    while pk.mm_sent < p.num_gpus:
        m = pk.mm_sent
        # a static object's members; DySHARP: the GPUs holding a target of this request
        member = targets_on_gpu(st, pk.req, k, m) > 0 if dyn else st.mm_member[k, m] != 0
        if member:
            out = pick_switch_output(st, ch.switch, m, VC_REQUEST)
            if out < 0:
                return m
            q = packet_alloc(st)
            qk = st.pk[q]
            qk.req = pk.req
            qk.src = pk.src
            qk.dst = m
            qk.addr = pk.addr
            qk.src_addr = pk.src_addr
            qk.payload = pk.payload
            qk.flits = pk.flits
            if dyn:
                qk.flits += pk.npk * (ext_flits(st, targets_on_gpu(st, pk.req, k, m))
                                      - ext_flits(st, ntargets))
            qk.npk = pk.npk
            qk.value = pk.value
            qk.mm_obj = pk.mm_obj
            qk.mm_op = pk.mm_op
            qk.mm_dtype = pk.mm_dtype
            qk.mm_entry = pk.mm_entry
            qk.mm_sent = 0
            qk.ready = tick
            if pk.kind == PK_MM_ST:
                qk.kind = PK_MM_COPY
                ch.mm_copies += pk.npk
                if dyn:
                    ch.dy_copies += pk.npk
            else:
                qk.kind = PK_MM_READ
                ch.mm_reads += pk.npk
            txq_push(st, out, q, tick)
        pk.mm_sent += 1
    # against unicast packets to each of the m members: m - 1 fewer on the source's uplink, and
    # for a reduction m - 1 fewer data packets on its downlink
    # (DySHARP: against one unicast packet per target GPU, and one data row per target)
    others = st.req[pk.req].dy_gpus - 1 if dyn else st.mm_objects[k, OBJ_MEMBERS] - 1
    ch.mm_up_saved += others * pk.flits * p.flit_bytes
    if dyn:
        ch.dy_targets_in += ntargets * pk.npk
    if pk.kind == PK_MM_LD:
        ch.mm_in_ld += pk.npk
        flits, _ = packet_flits(st, pk.value, p.store_payload)
        ch.mm_down_saved += (ntargets - 1 if dyn else others) * flits * p.flit_bytes
    else:
        ch.mm_in_st += pk.npk
    return NVLS_SENT


@compiled
def _entry_alloc(st, c, pkt, tick):
    """Reserve a reduction-buffer entry at input port c for ld_reduce packet pkt; False (and the
    port waits for room) if its buffer is full."""
    p = st.p[0]
    ch = st.ch[c]
    pk = st.pk[pkt]
    line = p.store_payload
    need = (pk.value + line - 1) // line * line
    if ch.mm_used + need > p.mm_buffer_bytes:
        if not ch.mm_wait:
            ch.mm_wait = 1
            ch.mm_wait_since = tick
        return False
    sy = st.sys[0]
    sy.mm_free_top -= 1
    e = st.mm_free[sy.mm_free_top]
    en = st.mm_entry[e]
    en.src_gpu = pk.src
    en.req = pk.req
    en.port = c
    # one contribution per member; DySHARP: per target (dysharp.py)
    en.pending = (st.req[pk.req].dy_count if st.mm_objects[pk.mm_obj, OBJ_TPG] > 0
                  else st.mm_objects[pk.mm_obj, OBJ_MEMBERS])
    en.bytes = need
    en.chunk = pk.value
    en.obj = pk.mm_obj
    en.elem = pk.mm_dtype
    en.local = pk.src_addr
    en.mm_addr = pk.addr
    ch.mm_used += need
    if ch.mm_used > ch.mm_peak:
        ch.mm_peak = ch.mm_used
    pk.mm_entry = e
    return True


@compiled
def nvls_absorb(st, c, pkt, tick):
    """A member's values (PK_MM_DATA) for a reduction entry reached the switch on input c: add
    them. Returns True if the packet is consumed (its input-buffer space frees at once), False
    for the entry's last contribution: the packet becomes the result (PK_MM_RESULT) and crosses
    to the source GPU in the response channel like any response."""
    p = st.p[0]
    pk = st.pk[pkt]
    e = pk.mm_entry
    en = st.mm_entry[e]
    st.ch[c].mm_data_in += pk.npk
    en.pending -= 1
    if en.pending > 0:
        credit_return_vc(st, c, pk.flits, input_free_tick(st, c, pkt, tick) + st.ch[c].latency,
                         packet_vc(st, pkt))
        packet_free(st, pkt)
        return True
    port = st.ch[en.port]
    port.mm_used -= en.bytes
    port.mm_reductions += 1
    port.mm_reductions_pk += pk.npk
    pk.kind = PK_MM_RESULT
    pk.src = en.src_gpu
    pk.dst = en.src_gpu
    pk.req = en.req
    pk.addr = en.local
    pk.src_addr = en.mm_addr
    pk.mm_obj = en.obj
    pk.mm_dtype = en.elem
    pk.mm_entry = -1
    sy = st.sys[0]
    st.mm_free[sy.mm_free_top] = e
    sy.mm_free_top += 1
    if port.mm_wait:
        # the port's head ld_reduce may fit now: its request channel moves again
        port.mm_wait = 0
        port.mm_wait_ticks += tick - port.mm_wait_since
        unblock_request_port(st, en.port, tick)
    return False


# ------------------------------------------------------------------------------ the members
@compiled
def nvls_read_arrived(st, g, c, pkt, tick):
    """A switch's read (PK_MM_READ) reached member g on down-channel c at `tick` (after the hub's
    receive latency): read the values from HBM and queue them to go back up the same link, to
    the switch that holds the entry. The read keeps its receive-buffer space until then."""
    gp = st.gpu[g]
    gp.mm_reads_rx += st.pk[pkt].npk
    answer_read(st, g, c, pkt, PK_MM_DATA, tick)
    queue_read_data(st, g, pkt)


@compiled
def nvls_copy_arrived(st, g, pkt, visible):
    """A multicast copy was written at member g (visible in memory at `visible`): apply it
    (functional data: st copies the source's bytes, red adds them) and count it; True once the
    member has every chunk of the operation (it then owes the source one write response)."""
    pk = st.pk[pkt]
    r = pk.req
    n = pk.payload
    st.gpu[g].mm_copies_rx += pk.npk
    # (a DySHARP copy was written into its targets' layout rows by dysharp.py)
    if st.mm_objects[pk.mm_obj, OBJ_TPG] == 0 and hbm_backed(st, pk.addr, n):
        if not hbm_backed(st, pk.src_addr, n):
            raise_error(st, ERR_UNBACKED_COPY, st.req[r].slot, pk.src_addr)
        else:
            dst = st.hbm_mem[g, pk.addr:pk.addr + n]
            src = st.hbm_mem[pk.src, pk.src_addr:pk.src_addr + n]
            if pk.mm_op == MM_RED:
                es = 2 if pk.mm_dtype == DT_BF16 else 4
                for i in range(n // es):
                    store_f32(dst, i, pk.mm_dtype,
                              np.float32(load_f32(dst, i, pk.mm_dtype) + load_f32(src, i, pk.mm_dtype)))
            else:
                for i in range(n):
                    dst[i] = src[i]
    st.mm_arrived[r, g] += 1
    if visible > st.mm_visible[r, g]:
        st.mm_visible[r, g] = visible
    return st.mm_arrived[r, g] == st.req[r].pkts_total


@compiled
def nvls_copies_answered(st, g, r):
    """Member g answers request r: its counters are free for the next request in that entry;
    returns when its last write is visible (the response leaves then)."""
    ready = st.mm_visible[r, g]
    st.mm_arrived[r, g] = 0
    st.mm_visible[r, g] = 0
    return ready


@compiled
def nvls_result_arrived(st, g, pkt):
    """A reduced result reached the source GPU g: the functional sum, FP32 accumulation over the
    members in rank order, rounded once to the element type (module docstring)."""
    pk = st.pk[pkt]
    n = pk.payload
    st.gpu[g].mm_results_rx += pk.npk
    if not hbm_backed(st, pk.addr, n):
        return
    if not hbm_backed(st, pk.src_addr, n):
        raise_error(st, ERR_UNBACKED_COPY, st.req[pk.req].slot, pk.src_addr)
        return
    dt = pk.mm_dtype
    k = pk.mm_obj
    es = 2 if dt == DT_BF16 else 4
    out = st.hbm_mem[g, pk.addr:pk.addr + n]
    for i in range(n // es):
        acc = np.float32(0.0)
        first = True
        for m in range(st.p[0].num_gpus):
            if st.mm_member[k, m]:
                v = load_f32(st.hbm_mem[m, pk.src_addr:pk.src_addr + n], i, dt)
                if first:
                    acc = v
                    first = False
                else:
                    acc = np.float32(acc + v)
        store_f32(out, i, dt, acc)


@compiled
def multimem_element_bytes(dtype):
    """Granularity of a multimem operation's size: its element (1 byte for st)."""
    if dtype == DT_NONE:
        return 1
    return 2 if dtype == DT_BF16 else 4
