"""MoE workload descriptions: model shapes (`models`), token-to-expert routing generators
(`routing`) and a NumPy reference of the MoE layer the simulator's functional mode computes
(`reference`)."""
