"""MoE dispatch/combine schemes: each module's `plan(layer)` returns a SchemePlan (its buffers,
launches and kernel files) for the layer in moehub_arch/workloads/layer.py."""
