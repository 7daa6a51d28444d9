"""Where a block's compiled code hands a packet (or an instruction) to whichever block declared
it: the dispatch functions the composition generates from the declarations (engine/generated.py)
and installs here, once, when it is imported - before anything can be compiled, since every
compiled call takes a State, and the State's type comes from the composition.

A block calls them as attributes of this module (``extension.switch_serve(st, c, pkt, tick)``):
Numba reads a module's attribute as a global when it compiles the caller, so the call is a direct
call (and, the functions being `@inline`, their chain is copied into the caller), exactly what a
hand-written branch was; the pure-Python engine looks the attribute up at each call. Until the
composition has filled a slot it holds None, which Numba refuses to compile (a caller compiled
too early fails loudly instead of caching a wrong chain).

- ``switch_serve(st, c, pkt, tick)``: the packet at the head of switch input c, if its kind is
  one a block declared with ``Crossing`` (NVLS's multimem requests, CAIS's merges, the switch
  counters...): that block's handler serves it and its result is returned (switch.py); any other
  kind returns ``ROUTE``: the crossbar routes it toward its destination GPU.
- ``execute(st, sem, g, sm, slot, row, tick, cyc)``: an instruction whose semantic a block
  declared with ``Semantic`` (MoE-Hub's stores, claim and notify, multimem, CAIS, the switch
  counters): that block's handler executes it (True: it completed its issue). ``SEMANTICS``: the
  bit of each such semantic (the interpreter tests it before its own branches).
- ``switch_absorb(st, c, pkt, tick)``: a packet reached switch input c; if its kind is one a
  block declared with ``Crossing(arrival=True)`` (NVLS's reduction data), that block's handler
  may absorb it (True) before it is buffered; any other kind: False.
"""
ROUTE = -(1 << 40)   # switch_serve: no block serves this kind; the crossbar routes it
SENT = -1            # switch_serve: the packet is consumed (as a handler returns it)

switch_serve = None
switch_absorb = None
execute = None
SEMANTICS = None
