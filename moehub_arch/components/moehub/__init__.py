"""MoE-Hub control plane: destination-agnostic communication in each GPU's hub.

    rpm.py   runtime packet manager (sender): row intake, per-destination merge buffers,
             packetisation, arbitration among destinations, end of stream
    aau.py   address allocation unit (receiver): receive windows, bump-pointer allocation,
             completion records, stalls that hold link credits when a window or table is full
    dam.py   data availability manager (receiver): per-tile arrival counters, end-of-stream
             tracking, claims and wake-ups of waiting thread blocks, tile release

The instruction set is in isa/moehub.yaml; configuration in system.gpu.hub.moe (hardware) and
workload.moe (experts, placement, windows).
"""
