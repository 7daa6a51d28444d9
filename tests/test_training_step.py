"""The training step's arithmetic (moehub_arch/workloads/training_step.py): the 1F1B schedule on
hand-made stages (step time and bubble in closed form, a stage of another cost worked out by
hand), the micro-batch overlap, the data-parallel reduction and clear errors for bad input."""
import pytest

from moehub_arch.workloads.training_step import (LayerCost, StageTimes, TrainingError,
                                                 allreduce_us, pipeline_1f1b, split_layers,
                                                 stage_ops, training_step)


@pytest.mark.parametrize("p,m", [(1, 1), (2, 2), (2, 5), (4, 4), (4, 9), (8, 16)])
def test_equal_stages_closed_form(p, m):
    """Equal stages, no transfer time: step (m + p - 1)(F + B), bubble (p - 1)(F + B) - the 1F1B
    figures of Narayanan et al. (arXiv 2104.04473 section 2.2.1: bubble fraction (p - 1) / m of
    the ideal time)."""
    F, B = 3.0, 5.0
    r = pipeline_1f1b([StageTimes(F, B)] * p, m)
    assert r["step_us"] == pytest.approx((m + p - 1) * (F + B))
    assert r["bubble_us"] == pytest.approx((p - 1) * (F + B))
    assert r["bubble_us"] / (m * (F + B)) == pytest.approx((p - 1) / m)
    assert r["stage_busy_us"] == [pytest.approx(m * (F + B))] * p
    assert r["bubble_fraction"] == pytest.approx(r["bubble_us"] / r["step_us"])


def test_transfer_time_by_hand():
    """Two stages, two micro-batches, F 3, B 5, 0.5 per transfer: stage 0 F0 [0,3] F1 [3,6];
    stage 1 F0 [3.5,6.5] B0 [6.5,11.5] F1 [11.5,14.5] B1 [14.5,19.5]; stage 0 B0 [12,17]
    B1 [20,25]: step 25 = (m + p - 1)(F + B) + 2 (p - 1) x 0.5, bubble 9. With more micro-batches
    the steady state also waits for the round trips: 2 stages x 5 micro-batches take 4 x 0.5 more
    than (m + p - 1)(F + B)."""
    r = pipeline_1f1b([StageTimes(3, 5)] * 2, 2, p2p_us=0.5)
    assert r["stage_end_us"] == [25.0, 19.5] and r["bubble_us"] == 9.0
    assert pipeline_1f1b([StageTimes(3, 5)] * 2, 5, p2p_us=0.5)["step_us"] > 6 * 8 + 1


def test_uneven_stages_by_hand():
    """Two stages, two micro-batches, stage 1 slower (F 2, B 4) than stage 0 (F 1, B 2).
    stage 0: F0 [0,1] F1 [1,2] ... B0 waits for stage 1's B0; stage 1: F0 [1,3] B0 [3,7]
    F1 [7,9] B1 [9,13]; stage 0: B0 [7,9] B1 [13,15]. Step 15; the busiest stage (1, busy 12)
    idles 3."""
    r = pipeline_1f1b([StageTimes(1, 2), StageTimes(2, 4)], 2)
    assert r["stage_end_us"] == [15.0, 13.0]
    assert r["step_us"] == 15.0 and r["bubble_us"] == 3.0


def test_1f1b_op_order():
    assert stage_ops(0, 3, 4, False) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3),
                                         ("B", 1), ("B", 2), ("B", 3)]
    assert stage_ops(2, 3, 4, False) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2),
                                         ("B", 2), ("F", 3), ("B", 3)]
    # with overlap the steady-state backwards after a forward of another micro-batch may
    # overlap it; the last stage's may not (the same micro-batch)
    assert stage_ops(0, 3, 4, True) == [("F", 0), ("F", 1), ("Fo", 2), ("Bo", 0), ("Fo", 3),
                                        ("Bo", 1), ("B", 2), ("B", 3)]
    assert stage_ops(2, 3, 4, True) == stage_ops(2, 3, 4, False)


def test_micro_batch_overlap_hides_exposed_time():
    """F 4 (1 exposed), B 6 (2 exposed): a steady pair lasts max(3 + 4, 1 + 2, 4, 6) = 7 instead
    of 10 (F 2.8, B 4.2). Two equal stages, 3 micro-batches: stage 0 F0 [0,4] F1 [4,6.8];
    stage 1 F0 [4,8] B0 [8,14]; stage 0 B0 [14,18.2] F2 [18.2,21]; stage 1 F1 [14,18] B1 [18,24];
    stage 0 B1 [24,28.2]; stage 1 F2 [24,28] B2 [28,34]; stage 0 B2 [34,40]: stage 0 saves 6 us
    of busy time but the last stage (no overlap: one micro-batch per pair) sets the step, 40 as
    without overlap. With a fast last stage the overlap shortens the step by what it saves."""
    st = [StageTimes(4, 6, 1, 2)] * 2
    plain, ov = pipeline_1f1b(st, 3), pipeline_1f1b(st, 3, overlap=True)
    assert ov["overlap_saved_us"] == pytest.approx(6.0)
    assert ov["stage_end_us"] == [pytest.approx(40.0), pytest.approx(34.0)]
    assert plain["step_us"] == ov["step_us"] == pytest.approx(40.0)
    st = [StageTimes(4, 6, 1, 2), StageTimes(1, 1)]
    plain, ov = pipeline_1f1b(st, 4), pipeline_1f1b(st, 4, overlap=True)
    assert ov["overlap_saved_us"] == pytest.approx(3 * 3.0)     # 3 steady pairs on stage 0
    assert ov["stage_busy_us"][0] == pytest.approx(plain["stage_busy_us"][0] - 9.0)
    assert ov["step_us"] < plain["step_us"]
    none = [StageTimes(4, 6)] * 2
    assert pipeline_1f1b(none, 3, overlap=True)["overlap_saved_us"] == 0.0


def test_allreduce_and_training_step():
    # ring: 2 (n - 1) / n x bytes at the bandwidth: 8 GPUs, 1 GB at 100 GB/s -> 17.5 ms
    assert allreduce_us(1e9, 8, 100e9) == pytest.approx(17500.0)
    assert allreduce_us(1e9, 1, 100e9) == 0.0
    assert split_layers(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    dense = LayerCost("dense", 10.0, 20.0, replicated_params=1000)
    moe = LayerCost("moe", 30.0, 50.0, 5.0, 10.0, moe_us=60.0, replicated_params=500)
    layers = [dense, moe, moe, moe]
    r = training_step(layers, stages=2, micro_batches=4, dp_gpus=4, gpu_bandwidth_Bps=1e6,
                      grad_bytes=4, overlap_grad_reduce=False)
    # stages: [dense, moe] F 40 B 70, [moe, moe] F 60 B 100; DP bytes 6000 and 4000 B
    assert r["stage_layers"] == [[0, 1], [2, 3]]
    assert r["dp_allreduce_us"] == [pytest.approx(9000.0), pytest.approx(6000.0)]
    assert r["step_us"] == pytest.approx(max(e + d for e, d in zip(r["stage_end_us"],
                                                                   r["dp_allreduce_us"])))
    assert r["moe_share"] == pytest.approx(3 * 60.0 / (30.0 + 3 * 80.0))
    assert r["exposed_comm_us"] == pytest.approx(4 * 2 * 15.0)
    hidden = training_step(layers, 2, 4, 4, 1e6, overlap_grad_reduce=True)
    assert hidden["dp_exposed_us"] == [pytest.approx(9000.0 - 70.0), pytest.approx(6000.0 - 100.0)]


def test_bad_input_is_a_clear_error():
    with pytest.raises(TrainingError, match="at least as many micro-batches as stages"):
        pipeline_1f1b([StageTimes(1, 2)] * 4, 3)
    with pytest.raises(TrainingError, match="stages for 2 layers"):
        split_layers([0, 1], 3)
    with pytest.raises(TrainingError, match="exposed part exceeds"):
        StageTimes(1, 2, 3, 0)
    with pytest.raises(TrainingError, match=">= 0"):
        StageTimes(-1, 2)
    assert TrainingError.exit_code == 2
