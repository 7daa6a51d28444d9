"""Component declarations (moehub_arch/declare.py) and their composition (composition.py): every
record field, parameter, stat, event and timer of the engine is declared by exactly one block,
the composition refuses conflicting declarations, and the declarations are what the tools print."""
import pytest
from pathlib import Path

from conftest import load, run_cli

from moehub_arch import composition
from moehub_arch.declare import Block, Event, Field, Param, Record, SCOPES, Timer
from moehub_arch.composition import State


def test_every_record_of_state_is_declared_and_composed():
    # every record array of State has its dtype from the declarations, and vice versa
    records = {name for name in State._fields if name in composition.RECORDS}
    assert records == set(composition.RECORDS)
    records_by_name = {r.name: r for b in composition.BLOCKS for r in b.records}
    for entity, dtype in composition.RECORDS.items():
        declared = [f.name for b in composition.BLOCKS for f in b.fields if f.entity == entity]
        first = list(records_by_name[entity].first)
        # the record's hot fields first, then the rest in declaration order
        assert list(dtype.names) == first + [n for n in declared if n not in first]
        # line-aligned records: whole cache lines, fields packed from the start
        size = 8 * len(declared)
        if records_by_name[entity].cache_lines:
            size = -(-size // composition.CACHE_LINE_BYTES) * composition.CACHE_LINE_BYTES
        assert dtype.itemsize == size
        assert [dtype.fields[n][1] for n in dtype.names] == list(range(0, 8 * len(declared), 8))


def test_line_aligned_records_start_a_cache_line():
    # the packet pool and the link channels (Record.cache_lines): every record's first field is
    # the first word of a cache line, whatever address numpy's allocator returned
    assert composition.RECORDS["pk"].itemsize % composition.CACHE_LINE_BYTES == 0
    assert composition.RECORDS["ch"].itemsize % composition.CACHE_LINE_BYTES == 0
    cfg = load("ubench/alltoall.yaml")
    for n in (1, 3, 1000):
        rec = composition.new_record_array("ch", n, cfg)
        assert rec.ctypes.data % composition.CACHE_LINE_BYTES == 0
        assert rec.shape == (n,) and (rec.tx_at == -1).all() and (rec.busy_until == 0).all()
    # a packet's per-hop fields share its first line
    pk = composition.RECORDS["pk"]
    for name in ("kind", "npk", "flits", "wire", "ready", "payload", "src", "dst"):
        assert pk.fields[name][1] < composition.CACHE_LINE_BYTES


def test_arrays_of_32_byte_rows_start_a_cache_line_and_hot_paths_touch_few_lines():
    # the event heap, the timers, the HBM calendar and the link FIFOs hold 32-byte rows (two a
    # line, none straddling two: engine/state.py aligned_zeros), thread blocks and SMs whole
    # lines; layout changes no result (the golden stats), this checks the layout itself
    from moehub_arch.components import nvlink
    from moehub_arch.simulation import Simulation
    st = Simulation(load("ubench/alltoall.yaml")).state
    for name in ("q", "timer", "txq", "rsq", "credit_ret", "mem_cal", "ch", "tb", "sm"):
        arr = getattr(st, name)
        assert arr.ctypes.data % composition.CACHE_LINE_BYTES == 0, name
    for name in ("q", "timer", "txq", "rsq", "credit_ret", "mem_cal"):
        assert getattr(st, name).strides[-2] == 32, name
    ch = composition.RECORDS["ch"]
    line = lambda f: ch.fields[f][1] // composition.CACHE_LINE_BYTES   # noqa: E731
    # what a packet's arrival at a switch reads of its input channel, and its push into an output
    # of that output: three lines each (components/nvlink.py CHANNEL_HOT_FIELDS)
    arrival = ("wire_head", "wire_count", "to_switch", "switch", "latency", "traversal",
               "fs_per_byte", "rx_packets", "rx_wire_bytes", "rx_payload_bytes", "rxq_head",
               "rxq_count", "rxq_peak", "xbar_blocked", "cr_count", "cr_last", "cr_head",
               "cr_next", "credit_blocked")
    push = ("ahead_count", "ahead_at", "txq_pkts", "txq_cap", "txq_head", "txq_count", "txq_peak",
            "txq_ready", "txq_flits", "busy_until", "tx_at", "rsq_count", "rsq_ready")
    assert len({line(f) for f in arrival}) == 3 and len({line(f) for f in push}) == 3
    assert max(line(f) for f in nvlink.CHANNEL_HOT_FIELDS) < 7


def test_a_record_cannot_put_first_a_field_nobody_declares():
    blk = Block("bad", "a record whose hot fields name an undeclared field",
                records=(Record("thing", "", first=("missing",)),),
                fields=(Field("thing", "present", ""),))
    with pytest.raises(composition.DeclarationError, match="missing"):
        composition._compose_records([blk])


def test_every_parameter_names_its_config_key_unit_and_source():
    for b in composition.BLOCKS:
        for p in b.params:
            assert p.unit and p.doc, (b.name, p.field)
            assert p.source.startswith(("config: ", "derived: ")) or p.source, (b.name, p.field)
            if p.source.startswith("config: "):
                assert p.key, (b.name, p.field)
    fields = composition.PARAMS.names
    assert len(fields) == len(set(fields))
    # one tm_<timer> per declared timer, laid out in declaration order
    cfg = load("ubench/alltoall.yaml")
    layout, count = composition.timer_layout(cfg)
    G, S, L = cfg.system.num_gpus, cfg.system.gpu.num_sms, cfg.system.nvlink.links_per_gpu
    assert layout == {"tm_sm": 0, "tm_ch_tx": G * S, "tm_ch_arrive": G * S + 2 * G * L,
                      "tm_xbar": G * S + 4 * G * L, "tm_hub": G * S + 6 * G * L,
                      "tm_rpm": G * S + 6 * G * L + G,
                      "tm_cais": G * S + 6 * G * L + 2 * G}
    assert count == G * S + 6 * G * L + 2 * G + 1   # one CAIS merge table's timer (none in use)


def test_event_kinds_are_dense_and_named_by_their_blocks():
    kinds = {e.kind: (b.name, e.name) for b in composition.BLOCKS for e in b.events}
    assert sorted(kinds) == list(range(composition.NUM_EVENT_KINDS))
    assert composition.EVENT_NAMES == tuple(kinds[k][1] for k in sorted(kinds))
    from moehub_arch.components.nvlink import EV_CH_TX
    assert composition.EVENT_NAMES[EV_CH_TX] == "ch_tx"


def test_stat_groups_use_known_scopes():
    for b in composition.BLOCKS:
        for g in b.stats:
            assert g.scope in SCOPES


@pytest.mark.parametrize("blocks, message", [
    ((Block("a", "", records=(Record("x", ""),)), Block("b", "", records=(Record("x", ""),))),
     "record 'x' declared by blocks a and b"),
    ((Block("a", "", records=(Record("x", ""),), fields=(Field("x", "n", ""), Field("x", "n", ""))),),
     r"field 'n' declared twice \(blocks \['a', 'a'\]\)"),
    ((Block("a", "", fields=(Field("nowhere", "n", ""),)),), "entity 'nowhere', which no block"),
    ((Block("a", "", records=(Record("x", ""),), fields=(Field("x", "nbytes", ""),)),),
     "shadow numpy.record attributes"),
])
def test_conflicting_record_declarations_are_refused(blocks, message):
    with pytest.raises(composition.DeclarationError, match=message):
        composition._compose_records(blocks)


def test_conflicting_events_and_timers_are_refused():
    with pytest.raises(composition.DeclarationError, match="declared twice"):
        composition._compose_events((Block("a", "", events=(Event("e", 0, ""),)),
                                     Block("b", "", events=(Event("f", 0, ""),))))
    with pytest.raises(composition.DeclarationError, match="must be 0..1"):
        composition._compose_events((Block("a", "", events=(Event("e", 0, ""), Event("f", 2, ""))),))
    with pytest.raises(composition.DeclarationError, match="no block declares"):
        composition._compose_timers((Block("a", "", timers=(Timer("t", 5, len, ""),)),))


def test_state_gets_the_arrays_blocks_declare_with_their_size():
    from moehub_arch.declare import Array
    b = Block("x", "", records=(Record("xr", "", count=lambda cfg: 3),),
              fields=(Field("xr", "a", "", 7),), arrays=(Array("xa", "", lambda cfg: (2, 5), -1),))
    state, sized = composition._compose_state(composition.BLOCKS + (b,))
    # every existing field kept in its order; the new record and array added (records before arrays)
    assert tuple(f for f in state._fields if f not in ("xr", "xa")) == State._fields
    assert state._fields.index("xr") < state._fields.index("xa") == len(state._fields) - 1
    with pytest.raises(composition.DeclarationError, match="exists already"):
        composition._compose_state((Block("y", "", arrays=(Array("gpu", "", len),)),))
    with pytest.raises(composition.DeclarationError, match="needs a count"):
        composition._compose_state((Block("y", "", records=(Record("yr", ""),)),))


def test_init_values_come_from_the_declarations():
    cfg = load("ubench/alltoall.yaml")
    gpu = composition.new_record_array("gpu", 2, cfg)
    assert list(gpu.free_top) == [cfg.system.gpu.hub.max_outstanding_requests] * 2
    assert list(gpu.hub_next_tx) == [-1, -1] and list(gpu.hbm_read_bytes) == [0, 0]
    ch = composition.new_record_array("ch", 3, cfg)
    assert list(ch.tx_at) == [-1] * 3 and list(ch.credits) == [0] * 3   # credits: NVLink's build
    with pytest.raises(ValueError, match="not declared"):
        from moehub_arch.declare import fields
        fields("gpu", "a", init={"b": 1})


def test_build_hooks_set_link_credits_and_queue_depths():
    # NVLink's build hook (nvlink.build_links) and the NIC's after it (nic.build_pcie_queues)
    from moehub_arch.declare import Building
    from moehub_arch.topology import LINK_PCIE
    for config, nodes in (("ubench/alltoall.yaml", 1), ("validation/h800_deepep_ll.yaml", 2)):
        cfg = load(config, f"system.nodes.count={nodes}", f"system.num_gpus={8 * nodes}")
        assert (cfg.system.nodes.count > 1) == (nodes > 1)
        nv = cfg.system.nvlink
        ch = composition.new_record_array("ch", 4, cfg)
        ch.rx_credits[:] = [nv.rx_buffer_flits, nv.rx_buffer_flits + 5, nv.rx_buffer_flits, 3]
        ch.src_switch[:] = [-1, 0, -1, 0]
        ch.link_class[:] = [0, 0, LINK_PCIE, 0]
        building = Building(ch)
        composition.build_blocks(cfg, building)
        assert list(ch.credits) == list(ch.rx_credits)
        pcie_q = -(-cfg.system.nic.dma_read_ahead // min(nv.store_packet_bytes, nv.max_payload_bytes))
        assert list(ch.txq_cap) == [nv.tx_queue_packets, cfg.system.switch.output_queue_packets,
                                    max(1, pcie_q) if nodes > 1 else nv.tx_queue_packets,
                                    cfg.system.switch.output_queue_packets]
        rsp = nv.response_buffer_flits if nv.response_path == "separate" else 1
        deepest = nv.rx_buffer_flits + 5
        assert building.sizes == {"rxq_cap": deepest, "rsp_rx_cap": rsp, "in_flight": deepest + rsp}
        assert (ch.rsp_credits == rsp).all()


def test_every_packet_kind_a_gpu_receives_has_one_handler_the_run_loop_calls():
    # Block.receives: the hub keeps its base kinds; NVLS, CAIS, the AAU and the counters take theirs
    import importlib
    import re
    from moehub_arch.components import packet as pk
    from moehub_arch.components import switch_counter as sc
    from moehub_arch.declare import Receive
    from moehub_arch.dispatch import chains
    to_switch = {pk.PK_MM_ST, pk.PK_MM_LD, pk.PK_MM_DATA, pk.PK_CAIS_LD, pk.PK_CAIS_RED,
                 pk.PK_CAIS_DATA, pk.PK_CAIS_SYNC, sc.PK_CTR_ADD}
    assert set(composition.RECEIVES) == set(range(len(composition.PACKET_KIND_NAMES))) - to_switch
    assert {b for b, _ in composition.RECEIVES.values()} == {"hub", "nvls", "cais_merge", "aau",
                                                              "switch_counter"}
    # the run loop's receive chain is generated from them: each handler called once, with the
    # arguments Receive names (by address through the entry table where it says so, or where its
    # block is compiled on demand)
    chain = chains.SOURCE.split("def receive_packet")[1].split("@inline")[0]
    for b, r in composition.RECEIVES.values():
        module, fn = r.handler.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(f"moehub_arch.{module}"), fn))
        if r.by_address or composition.block(b).on_demand is not None:
            row = composition.entry_row(r.handler)
            assert chain.count(f"call_void4({row}, st, g, c, pkt, tick)") == 1, r.handler
        else:
            assert len(re.findall(rf"\b{fn}\(st, g, c, pkt, tick\)", chain)) == 1, r.handler
    with pytest.raises(composition.DeclarationError, match="received by blocks 'a'"):
        composition._compose_receives((Block("a", "", receives=(Receive((3,), "x.f", ""),)),
                                       Block("b", "", receives=(Receive((3,), "x.g", ""),))))


def test_every_request_kind_the_hub_queues_has_one_packetizer_the_run_loop_calls():
    # Block.sends: the hub sends its base kinds; multimem, DySHARP, CAIS and the counters send theirs
    import importlib
    import re
    from pathlib import Path
    from moehub_arch.components import packet as pk
    from moehub_arch.declare import Send
    from moehub_arch.dispatch import chains
    assert set(composition.SENDS) == set(range(len(composition.REQUEST_KIND_NAMES)))
    assert {b for b, _ in composition.SENDS.values()} == {"hub", "nvls", "dysharp", "cais_merge",
                                                           "switch_counter"}
    assert {k for k, (b, _) in composition.SENDS.items() if b == "hub"} == {
        pk.REQ_PUT, pk.REQ_GET, pk.REQ_STORE, pk.REQ_ATOM}
    chain = chains.SOURCE.split("def send_request")[1].split("@inline")[0]
    for b, s in composition.SENDS.values():
        module, fn = s.handler.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(f"moehub_arch.{module}"), fn))
        if composition.block(b).on_demand is not None:
            row = composition.entry_row(s.handler)
            assert chain.count(f"call_void3({row}, st, g, r, tick)") == 1, s.handler
        else:
            assert len(re.findall(rf"\b{fn}\(st, g, r, tick\)", chain)) == 1, s.handler
    # the hub's module names no extension: their request kinds, packets and counters are theirs
    hub_src = (Path(composition.__file__).parent / "components" / "hub.py").read_text()
    assert not re.search(r"REQ_(MM|DY|CAIS|CTR)|PK_(MM|CAIS|CTR)|mm_tx|cais_\w+_tx|ext_flits", hub_src)
    assert not re.search(r"^from \.+(dysharp|cais|switch_counter)", hub_src, re.M)
    with pytest.raises(composition.DeclarationError, match="sent by blocks 'a'"):
        composition._compose_sends((Block("a", "", sends=(Send((3,), "x.f", ""),)),
                                    Block("b", "", sends=(Send((3,), "x.g", ""),))))


def test_the_dispatch_chains_follow_the_declarations():
    """The chains by kind are generated: each kind reaches its declared handler (evaluated on the
    generated functions in Python), the switch routes every kind no block serves, the kinds are
    dense and unique, the response channel's kinds are the declared ones."""
    import re
    import types
    from pathlib import Path
    from moehub_arch.components import switch_counter as sc
    from moehub_arch.declare import Crossing, Packet
    from moehub_arch.dispatch import chains
    from moehub_arch.engine import extension

    def run_chain(source, name, kind, var):
        calls = []
        ns = {}
        # the function's lines, not the next chain's imports
        body = source.split(f"def {name}")[1].split("@inline")[0].split("\nfrom ")[0]
        for line in source.splitlines():
            if line.startswith("from moehub_arch.engine.entries import"):
                # a call through the entry table: its row
                for fn in line.split(" import ")[1].split(", "):
                    ns[fn] = lambda row, *a: calls.append(("entry", row)) or ("entry", row)
            elif line.startswith("from moehub_arch") and "import inline" not in line:
                for fn in line.split(" import ")[1].split(", "):
                    ns[fn] = (lambda fn: lambda *a: calls.append(fn) or fn)(fn)
        ns["ROUTE"] = extension.ROUTE
        pkt = types.SimpleNamespace(kind=kind)
        st = types.SimpleNamespace(pk=[pkt], req=[pkt])
        exec(f"def {name}" + body, ns)
        args = {"receive_packet": (st, 0, 0, 0, 0),
                "send_request": (st, 0, 0, 0), "switch_serve": (st, 0, 0, 0),
                "switch_absorb": (st, 0, 0, 0), "block_event": (st, kind, 0, 0),
                "execute": (st, kind, 0, 0, 0, 0, 0, 0)}[name]
        out = ns[name](*args)
        return calls, out

    def called(handler):
        # a handler of the entry table is called through its row, any other directly
        if handler in (e.handler for e in composition.ENTRY_POINTS):
            return ("entry", composition.entry_row(handler))
        return handler.rsplit(".", 1)[1]

    for k, (_, r) in composition.RECEIVES.items():
        calls, _ = run_chain(chains.SOURCE, "receive_packet", k, "k")
        assert calls == [called(r.handler)], k
    for k, (_, s) in composition.SENDS.items():
        calls, _ = run_chain(chains.SOURCE, "send_request", k, "rk")
        assert calls == [called(s.handler)], k
    for k in composition.PACKETS:
        calls, out = run_chain(composition.EXTENSION_SOURCE, "switch_serve", k, "k")
        if k in composition.CROSSINGS:
            assert calls == [called(composition.CROSSINGS[k][1].handler)], k
        else:
            assert calls == [] and out == extension.ROUTE, k
        calls, out = run_chain(composition.EXTENSION_SOURCE, "switch_absorb", k, "k")
        if k in composition.ARRIVALS:
            assert calls == [called(composition.ARRIVALS[k][1].handler)], k
        else:
            assert calls == [] and out is False, k
    for k in range(len(composition.EVENT_NAMES)):
        calls, out = run_chain(chains.SOURCE, "block_event", k, "kind")
        if k in chains.BLOCK_EVENTS:
            assert calls == [called(chains.BLOCK_EVENTS[k][1].handler)], k
        else:
            assert calls == [] and out is None, k
    # the switch keeps the base protocol: it names no extension's kind or handler; a consumed
    # packet is the same value for every block that serves one
    from moehub_arch.components.cais.layout import CAIS_SENT
    from moehub_arch.components.nvls import NVLS_SENT
    assert NVLS_SENT == CAIS_SENT == sc.CTR_SENT == extension.SENT
    switch_src = (Path(composition.__file__).parent / "components" / "switch.py").read_text()
    assert not re.search(r"PK_(MM|CAIS|CTR)|nvls_|cais_|ctr_|^from \.(nvls|cais|switch_counter)",
                         switch_src, re.M)
    for sem, (_, d) in composition.SEMANTICS.items():
        calls, _ = run_chain(composition.EXTENSION_SOURCE, "execute", sem, "sem")
        assert calls == [called(d.handler)], sem
        assert extension.SEMANTICS >> sem & 1
    assert bin(extension.SEMANTICS).count("1") == len(composition.SEMANTICS)
    # the interpreter keeps the base ISA: no extension's semantic or handler is named there
    src = (Path(composition.__file__).parent / "components" / "sm_interpreter.py").read_text()
    assert not re.search(r"SEM_(SEND_EXPERT|CLAIM|NOTIFY|MULTIMEM|ROWSP|ST_ROWSP|CAIS|CTR)|"
                         r"ctr_add|multimem\(|cais_\w+\(|send_to_expert\(", src)
    assert composition.CROSSINGS[sc.PK_CTR_ADD][0] == "switch_counter"
    assert composition.PACKETS[sc.PK_CTR_REPLY].response
    assert composition.RESPONSE_KINDS >> sc.PK_CTR_REPLY & 1
    assert not composition.RESPONSE_KINDS >> sc.PK_CTR_ADD & 1
    with pytest.raises(composition.DeclarationError, match="packet kind 3 declared twice"):
        composition._compose_kinds((Block("a", "", packets=(Packet("x", 3, ""),)),
                                    Block("b", "", packets=(Packet("y", 3, ""),))), "packets",
                                   "packet kind")
    with pytest.raises(composition.DeclarationError, match="must be 0..0"):
        composition._compose_kinds((Block("a", "", packets=(Packet("x", 1, ""),)),), "packets",
                                   "packet kind")
    with pytest.raises(composition.DeclarationError, match="served in the switch by blocks 'a'"):
        composition._compose_handlers((Block("a", "", crossings=(Crossing((3,), "x.f", ""),)),
                                       Block("b", "", crossings=(Crossing((3,), "x.g", ""),))),
                                      "crossings", "packet kind {} is served in the switch")


def test_blocks_command_prints_the_declarations():
    r = run_cli("blocks", "aau")
    assert r.returncode == 0, r.stderr
    assert "aau: " in r.stdout
    assert "records_cap (records) <- system.gpu.hub.moe.aau.record_table_entries" in r.stdout
    assert "stat [gpu].hub.aau.alloc_stalls (packets)" in r.stdout
    assert "debug flag AAU (also in MoEHub)" in r.stdout
    r = run_cli("blocks", "nosuch")
    assert r.returncode == 2 and "no such block" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------- the worked example block
OCC_SYSTEM = ["system.num_gpus=4", "system.gpu.num_sms=4", "system.nvlink.links_per_gpu=2",
              "system.switch.count=2", "system.switch.gpu_link_switch=[0, 1]",
              "workload.launches.0.params.bytes_per_peer=65536", "workload.launches.0.params.chunk=8192"]


def test_occupancy_monitor_example():
    """docs/adding_a_block.md's example: a block declared in its module, configured in its own
    section, dispatched by one run-loop branch."""
    from conftest import model_stats, simulate
    period = 500_000   # 0.5 us in ps
    on = simulate("ubench/alltoall.yaml", *OCC_SYSTEM, f"stats.occupancy.period={period}ps")
    off = simulate("ubench/alltoall.yaml", *OCC_SYSTEM)
    st, stats = on.state, on.stats
    ends = int(st.ln.end.max())
    # samples at period, 2 * period, ... while a launch was unfinished, plus the one that saw the end
    samples = ends // period + 1
    assert stats["system.engine.events.occupancy_sample"] == samples
    for g in range(4):
        assert stats[f"system.gpu{g}.occupancy.samples"] == samples
        cap = int(st.reqq.shape[1])
        assert 0 <= stats[f"system.gpu{g}.occupancy.hub_request_queue_mean"] <= cap
        peak = stats[f"system.gpu{g}.occupancy.link_tx_queue_peak"]
        assert peak <= sum(int(st.ch[2 * (g * 2 + l)].txq_cap) for l in range(2))
        assert 0 < stats[f"system.gpu{g}.occupancy.link_tx_queue_mean"] <= peak
    # it only observes: every model stat of the run without it is the same with it, except the
    # run's end (its last sample may come after the last kernel) and what is averaged over it
    plain = model_stats(off.stats)
    assert not any(name.startswith(("system.gpu0.occupancy", "system.engine.events.occupancy"))
                   for name in plain)
    own = ("simTicks", "simSeconds", "simEvents", "system.engine.queue_peak", "utilization",
           "_GBps")
    for name, value in plain.items():
        if not name.endswith(own) and name not in own:
            assert model_stats(on.stats)[name] == value, name
    assert stats["simTicks"] <= int(off.stats["simTicks"]) + period
    assert stats["simEvents"] == off.stats["simEvents"] + samples   # its samples are events
    # its one pending sample sits in the event queue
    assert off.stats["system.engine.queue_peak"] <= stats["system.engine.queue_peak"] <= \
        off.stats["system.engine.queue_peak"] + 1


def test_occupancy_monitor_is_in_the_blocks_listing():
    r = run_cli("blocks", "occupancy")
    assert r.returncode == 0, r.stderr
    assert "occupancy_period (ps) <- stats.occupancy.period" in r.stdout
    assert "event 10 occupancy_sample" in r.stdout


def test_a_block_is_found_by_its_module():
    """composition.BLOCKS: the listed blocks in their order, then every other components/ module's
    BLOCK by module name (the switch counters: no list names them)."""
    from moehub_arch.components import switch_counter
    assert composition.discover() == (switch_counter.BLOCK,)
    assert composition.BLOCKS == composition._ORDER + (switch_counter.BLOCK,)
    assert composition.discover(listed=composition.BLOCKS) == ()
    src = (Path(composition.__file__)).read_text()
    assert "switch_counter" not in src


def test_the_run_loop_maps_each_timer_range_to_its_declared_event():
    """The run loop turns a due component timer into its event by the timer ranges' bounds, a
    chain generated from the Timer declarations in the order the composition places the ranges
    (dispatch/chains.py timer_event): every row of every range maps to its Timer's event, with
    its range's first row taken off (checked on a layout of distinct counts, in Python)."""
    import types
    from moehub_arch.dispatch import chains
    timers = composition.TIMERS
    first, layout = {}, 0
    for i, t in enumerate(timers):
        first[t.name] = layout
        layout += i + 2                      # ranges of 2, 3, 4... rows
    p = types.SimpleNamespace(**{f"tm_{n}": v for n, v in first.items()})
    ns = {}
    exec("def timer_event" + chains.SOURCE.split("def timer_event")[1], ns)
    for t in timers:
        for row in range(first[t.name], first[t.name] + timers.index(t) + 2):
            assert ns["timer_event"](p, row) == (t.event, row - first[t.name]), (t.name, row)


def test_a_block_declares_its_runtime_errors_and_codes_are_not_shared():
    """Block.errors: the switch counter's ctr.add range error is its own declaration (no edit of
    engine/state.py); a code the engine or another block holds is refused at composition."""
    from moehub_arch.declare import RunError
    from moehub_arch.engine.state import ERR_DIV_ZERO, ERROR_TEXT
    from moehub_arch.components.switch_counter import ERR_CTR_RANGE
    assert ERR_CTR_RANGE not in ERROR_TEXT
    assert "system.switch.counter.entries" in composition.ERROR_TEXT[ERR_CTR_RANGE]
    assert set(ERROR_TEXT) < set(composition.ERROR_TEXT)
    with pytest.raises(composition.DeclarationError, match="runtime error code .* is taken"):
        composition._compose_errors((Block("x", "", errors=(RunError(ERR_DIV_ZERO, "a"),)),),
                                    ERROR_TEXT)
    with pytest.raises(composition.DeclarationError, match="code 99 is taken"):
        composition._compose_errors((Block("x", "", errors=(RunError(99, "a"),)),
                                     Block("y", "", errors=(RunError(99, "b"),))), ERROR_TEXT)
