"""The register of model numbers (``flexcomm constants``, issue 42): every module-level number of the models is
either registered with its kind and source, or named here as something that is not a model number; fitted
values name what they were fitted on, and reports keep those rows out of their statistics."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from flexcomm.costmodel.constants import CONSTANTS, reference_fits, table
from flexcomm.experiments.cli import main

REPO = Path(__file__).resolve().parents[1]
MODEL_PACKAGES = ("costmodel", "sim", "planner", "compression", "emulation", "real_backend", "workloads", "controller",
                  "placement")
KINDS = ("cited", "derived", "design", "fitted", "borrowed")

#: Module-level numbers of the model packages that are not numbers the models price with, by why.
NOT_MODEL_NUMBERS: dict[str, tuple[str, ...]] = {
    "NCCL's or RCCL's own constants, cited in their module at a release tag": (
        "costmodel.collective_libraries.rccl.THREADS", "costmodel.collective_libraries.runtime.NVLS_THREADS",
        "costmodel.collective_libraries.runtime.COLLNET_THRESHOLD", "costmodel.collective_libraries.runtime.NCCL_STEPS",
        "costmodel.collective_libraries.topology.INTEL_P2P_OVERHEAD",
        "costmodel.collective_libraries.topology.SPEEDS_INTRA",
        "costmodel.collective_libraries.topology.SPEEDS_INTER",
        "costmodel.collective_libraries.topology.SM90_SPEEDS_INTRA",
        "costmodel.collective_libraries.topology.SM90_SPEEDS_INTRA_221",
        "costmodel.collective_libraries.topology.SM90_SPEEDS_INTER",
        "costmodel.collective_libraries.topology.SM100_SPEEDS_INTRA",
        "costmodel.collective_libraries.topology.SM100_SPEEDS_INTER",
        "costmodel.collective_libraries.versions.NVLS_EFFICIENCY", "costmodel.collective_libraries.versions.OLDEST",
        "costmodel.collective_libraries.versions.NEWEST", "costmodel.gemm_efficiency.SPLIT_K"),
    "a reference's own setting (its table's caption)": ("planner.llm.megatron.SEQ_LEN", "planner.llm.megatron.VOCAB"),
    "limits and caches (what an input may ask for, never what it costs)": (
        "costmodel.cluster_documents._MAX_EXTENDS", "costmodel.collective_libraries.logs.MAX_CALL_US",
        "costmodel.collective_libraries.logs._SNIFF_BYTES", "costmodel.collective_libraries.call_cost._MAX_TABLES",
        "real_backend.bench.MAX_SIZES", "real_backend.delayline.MAX_QUEUED_BYTES", "real_backend.testbed.MAX_RANKS",
        "sim.dynamics.MAX_JITTER_SIGMA", "sim.dynamics.RATE_WINDOW", "sim.scenario._MAX_ITERATIONS",
        "sim.scenario_plots.MAX_LINKS", "workloads.idx.MAX_NDIM", "real_backend.gpu_kit.LIMIT_BYTES",
        "sim.routes._MAX_PATHS", "compression.comm.HISTORY_LENGTH", "costmodel.bounded_stream.CHUNK_BYTES",
        "costmodel.cluster_parts.MAX_NVLINK_DOMAIN", "costmodel.units.MIN_BANDWIDTH_BPS",
        "workloads.profiler_trace.MAX_COLLECTIVE_BYTES", "workloads.user_model.MESSAGE_CHARS",
        "real_backend.kill_resume.RUN_TIMEOUT_S"),
    "report thresholds and validation targets": (
        "costmodel.collective_libraries.validation.SUMMARY_MIN_BYTES",
        "real_backend.adaptive_verdict.GOAL_PHASE_MARGIN",
        "real_backend.adaptive_verdict.GOAL_GAIN_POINTS", "real_backend.adaptive_verdict.NETWORK_BOUND",
        "real_backend.from_trace_validate.TARGET_TRACED", "real_backend.from_trace_validate.TARGET_MEDIAN",
        "real_backend.from_trace_validate.TARGET_WORST", "real_backend.trace_validate.GOAL_AGREEMENT",
        "real_backend.trace_validate.GOAL_MEDIAN", "real_backend.trace_validate.GOAL_WORST",
        "real_backend.validate.TARGET_MIN_BYTES", "real_backend.validate.TARGET_MEDIAN",
        "real_backend.validate.TARGET_WORST", "emulation.seeds.CONFIDENCE"),
    "drawing": (
        "costmodel.topologies.draw_model.AGGREGATE_ABOVE", "costmodel.topologies.draw_parts.FONT",
        "costmodel.topologies.draw_tiered.GPU_BOX_LIMIT", "costmodel.topologies.draw_tiered.LEGEND_WIDTH_IN",
        "costmodel.topologies.draw_torus.GAP", "costmodel.topologies.draw_torus.STUB",
        "costmodel.topologies.draw_torus.UNIT_IN", "costmodel.topologies.draw_torus.LEGEND_IN",
        "sim.scenario_plots.MIN_PEAK", "sim.scenario_plots.FOLD_TOLERANCE", "real_backend.validate.RING_WIDTH_PT",
        "real_backend.validate.RING_MIN_PT", "controller.plots.WIDTHS", "sim.scenario.TIME_BINS",
        "costmodel.topologies.draw.KEY_CHARS", "costmodel.topologies.draw_tiered.CHAR_WIDTH_EM",
        "costmodel.topologies.draw_tiered.LABEL_GAP_PT"),
    "units and formats": ("sim.buckets.MIB", "controller.traces.GBIT", "real_backend.bench.ELEMENT_BYTES",
                          "workloads.idx.UNSIGNED_BYTE", "sim.buckets.ONE_LAYER_PER_BUCKET",
                          "real_backend.from_trace_validate.VALUE_BYTES",
                          "real_backend.from_trace_validate.INDEX_BYTES"),
    "PyTorch's own defaults, cited in their module at a release tag": (
        "sim.gpu_data_parallel.FIRST_BUCKET_BYTES",),
    "identifiers and read windows of trace readers": (
        "sim.gpu_data_parallel.DDP_STREAM", "workloads.profiler_trace._HEADER_BYTES"),
    "matching tolerances of trace readers (what counts as the same device or the same instant)": (
        "sim.gpu_job._MEMORY_TOLERANCE", "sim.gpu_replay._CLOCK_US"),
    "numerical tolerances of the rate solver": ("sim.network._DONE_FRACTION", "sim.rate_allocation._TIE",
                                                "sim.rate_allocation._SMALL_FILL"),
    "operating-system and protocol codes": (
        "costmodel.errors.EXIT_RESUMABLE", "costmodel.processes._PR_SET_PDEATHSIG", "real_backend.delayline.TUNSETIFF",
        "real_backend.delayline.TUNSETOFFLOAD", "real_backend.delayline.IFF_TUN", "real_backend.delayline.IFF_NO_PI",
        "real_backend.delayline.IFF_VNET_HDR", "real_backend.delayline.READ_BYTES", "real_backend.dist.EXIT_WATCHDOG",
        "real_backend.launch.EXIT_TIMEOUT"),
    "tool timing, polling and messages": (
        "real_backend.bench.FSYNC_EVERY_S", "real_backend.launch.POLL_S", "real_backend.trace_control.POLL_S",
        "real_backend.trace_control.ACK_TIMEOUT_S",
        "real_backend.dist.DEFAULT_TIMEOUT_S",
        "costmodel.errors.ECHO_CHARS",
        "real_backend.checkpoints.REASON_CHARACTERS"),
    "run settings a user sets with a flag (their defaults)": (
        "real_backend.ddp_train.DEFAULT_WARMUP_STEPS", "real_backend.net_trace.DEFAULT_DURATION_S",
        "real_backend.trace_validate.DEFAULT_RANKS", "real_backend.trace_validate.LATENCY_SIZES",
        "real_backend.trace_validate.SOLO_STEPS", "real_backend.trace_validate.WARMUP_STEPS",
        "real_backend.trace_validate.CHECK_STEPS", "real_backend.from_trace_validate.TRACED_RANKS",
        "real_backend.gpu_compute.TENSOR_PARALLEL", "real_backend.gpu_topk.DEFAULT_SIZES",
        "real_backend.gpu_topk.DEFAULT_RATIOS", "workloads.data.FASHION_TEST_ORDER_SEED",
        "controller.traces.LATENCY_RANGE_S"),
    "hyperparameters of a learned method (not a cost)": ("placement.ppo.KIND_BUCKETS",),
}


def _numeric(node: ast.expr) -> bool:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        if isinstance(node, ast.BinOp):
            try:
                value = eval(compile(ast.Expression(node), "constant", "eval"), {})  # noqa: S307 (literals only)
            except Exception:  # noqa: BLE001 (a name: not a literal)
                return False
        else:
            return False
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, tuple) and bool(value) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


def _module_numbers() -> list[str]:
    found = []
    for package in MODEL_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                targets = (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
                value = getattr(node, "value", None)
                for target in targets:
                    if isinstance(target, ast.Name) and target.id.isupper() and value is not None and _numeric(value):
                        found.append(f"{module}.{target.id}")
    return found


def test_every_model_number_is_registered_or_said_not_to_be_one() -> None:
    registered = {c.name for c in CONSTANTS}
    excluded = {name for names in NOT_MODEL_NUMBERS.values() for name in names}
    assert not registered & excluded
    unclassified = [name for name in _module_numbers() if name not in registered | excluded]
    assert not unclassified, ("module-level numbers neither in costmodel/constants.py nor in NOT_MODEL_NUMBERS: "
                              + ", ".join(unclassified))
    stale = sorted(excluded - set(_module_numbers()))
    assert not stale, f"NOT_MODEL_NUMBERS names numbers that no longer exist: {stale}"


def test_every_registered_number_has_its_source_kind_and_value() -> None:
    for constant in CONSTANTS:
        assert constant.kind.split()[0] in KINDS, constant.name
        assert constant.source, f"{constant.name}: no #: comment says where it comes from"
        assert constant.value is not None
        assert (constant.kind == "fitted") == bool(constant.fitted_on), constant.name


def test_fitted_values_are_listed_and_their_rows_left_out_of_prediction_statistics() -> None:
    """A test that fails if a reported prediction statistic includes a row any value was fitted on."""
    from flexcomm.experiments.tyagi_table4 import TABLE_IV, reproduce_table_iv, row_key, summary

    fits = reference_fits()
    assert [f["fitted_on"] for f in fits] == ["tyagi-swany-2023-table4:vit:dense"]
    table4 = reproduce_table_iv()
    fitted_keys = {f["fitted_on"] for f in fits}
    counted = summary(table4).groupby("rows")["points"].first()
    rows = [row_key(model, scheme, ratio) for model, scheme, ratio, _, _ in TABLE_IV]
    expected = {"dense": sum(1 for k in rows if k.endswith(":dense") and k not in fitted_keys),
                "sparse": sum(1 for k in rows if not k.endswith(":dense") and k not in fitted_keys)}
    assert counted.to_dict() == expected


def test_the_command_prints_the_register(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["constants", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(table()) and {"name", "value", "unit", "kind", "fitted_on", "source"} <= set(rows[0])
    assert main(["constants", "--kind", "borrowed"]) == 0
    assert "GH200.mamf" in capsys.readouterr().out
    assert main(["constants", "--kind", "guessed"]) == 2
    assert "kind: got 'guessed'" in capsys.readouterr().err
