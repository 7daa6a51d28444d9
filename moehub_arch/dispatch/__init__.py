"""The dispatch floor, above the hardware blocks (components/) and below the simulation, the
runner, the builder, the Python API and the command line: the compiled run loop that pops events
and hands each to its block's handler (loop.py), the handlers it calls by address (indirect.py)
and the cold-start compile of both (precompile.py). The engine floor under the blocks
(moehub_arch/engine: event queue, State, JIT, clock...) knows no block; this floor knows them all."""
