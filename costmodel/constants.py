"""Every number the models use that neither a datasheet (the device catalog, a cluster file) nor NCCL's, RCCL's or
gloo's source gives: its value, unit, kind, source and, if fitted, what it was fitted on (``flexcomm constants``).

Why a register: a constant chosen to make a table look good is indistinguishable, in code, from one read off a
paper. Here each says which it is. The value and the source are read from the module that defines the constant
(the ``#:`` comment above it), so the register cannot drift from the code; ``tests/test_constants.py`` scans the
model's modules and fails on a module-level number that is neither here nor in :data:`NOT_MODEL_NUMBERS`.

Kinds:

* ``cited``: a value a cited source states (a paper, a framework's code, a protocol);
* ``derived``: arithmetic on cited facts (header bytes, passes over memory);
* ``design``: a choice of the method, not a property of hardware (a threshold, a search space, a prior);
* ``fitted``: chosen to match measurements; ``fitted_on`` names them, and reports keep those rows out of their
  prediction statistics;
* ``borrowed``: a sibling's measured value standing in for one not measured.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from flexcomm.costmodel.devices import catalog
from flexcomm.validation import reference_rows


@dataclass(frozen=True)
class ModelConstant:
    """One registered number: where it lives, its unit and kind; its value and source are read from the code."""

    module: str  # flexcomm.<package>.<module>
    attribute: str
    unit: str
    kind: str  # cited | derived | design | fitted | borrowed
    fitted_on: str = ""

    @property
    def name(self) -> str:
        return f"{self.module.removeprefix('flexcomm.')}.{self.attribute}"

    @property
    def value(self) -> Any:
        return getattr(importlib.import_module(self.module), self.attribute)

    @property
    def source(self) -> str:
        """The ``#:`` comment block above the assignment (or the comment on its line)."""
        return comment_of(self.module, self.attribute)


def comment_of(module: str, attribute: str) -> str:
    lines = inspect.getsource(importlib.import_module(module)).splitlines()
    for node in ast.parse("\n".join(lines)).body:
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign)
                   else [])
        if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
            above = []
            i = node.lineno - 2
            while i >= 0 and lines[i].lstrip().startswith("#:"):
                above.insert(0, lines[i].lstrip()[2:].strip())
                i -= 1
            inline = lines[node.lineno - 1].split("#", 1)[1].lstrip(":").strip() if "#" in lines[
                node.lineno - 1] else ""
            return " ".join(above) or inline
    return ""


def _c(module: str, attribute: str, unit: str, kind: str, fitted_on: str = "") -> ModelConstant:
    return ModelConstant(f"flexcomm.{module}", attribute, unit, kind, fitted_on)


#: The register (see the module doc), grouped by engine.
CONSTANTS: tuple[ModelConstant, ...] = (
    # compute
    _c("costmodel.compute", "DEFAULT_EFFICIENCY", "fraction of peak", "cited"),
    _c("costmodel.compute", "V100_TOPK_ELEMENTS_PER_S", "elements/s", "cited"),
    _c("costmodel.compute", "DEFAULT_BACKWARD_FACTOR", "backward / forward FLOPs", "cited"),
    _c("costmodel.device_compute", "BACKWARD_MEMORY_FACTOR", "backward / forward bytes", "design"),
    _c("costmodel.device_compute", "UNSHAPED_TOLERANCE", "relative FLOPs", "design"),
    _c("costmodel.torch_kernels", "BIAS_ACCESSES", "element accesses / output element", "derived"),
    _c("costmodel.torch_kernels", "NORM_INPUT_READS", "reads / input element", "derived"),
    _c("costmodel.devices", "CONSERVATIVE_RIDGE_FLOP_PER_BYTE", "FLOP/byte", "derived"),
    _c("costmodel.compression_compute", "POWERSGD_KERNELS_PER_MATRIX", "kernels", "cited"),
    _c("costmodel.compression_compute", "POWERSGD_BYTES_PER_ELEMENT", "bytes/element", "derived"),
    _c("costmodel.compression_compute", "CAST_BYTES_PER_ELEMENT", "bytes/element", "derived"),
    _c("costmodel.compression_compute", "THRESHOLD_BYTES_PER_ELEMENT", "bytes/element", "derived"),
    _c("costmodel.compression_compute", "DEFAULT_ACHIEVABLE", "fraction of peak", "cited"),
    _c("costmodel.compressed", "DEFAULT_POWERSGD_RANK", "rank", "cited"),
    _c("costmodel.collective_formulas", "PIPELINE_SEGMENT_BYTES", "bytes", "design"),
    _c("planner.llm.timing", "FORWARD_TRAFFIC_PER_STORED_BYTE", "bytes/byte", "derived"),
    _c("planner.llm.timing", "ADAM_BYTES_PER_PARAMETER", "bytes", "derived"),
    _c("planner.llm.layout_step", "BF16", "bytes/element", "cited"),
    _c("planner.llm.layout_step", "FLASH_BACKWARD", "backward / forward time", "cited"),
    _c("planner.llm.layout_step", "ADAM_STATE_BYTES", "bytes/parameter", "cited"),
    _c("planner.plans", "ADAM_STATE_MULTIPLE", "x fp32 parameter bytes", "cited"),
    _c("planner.plans", "GRADIENT_BYTES", "bytes/element", "derived"),
    _c("planner.graph_plan", "SAMPLES_PER_DEVICE", "samples", "cited"),
    _c("costmodel.gradient_exchange", "DEFAULT_TOPK_RATIO", "fraction of elements", "design"),
    _c("planner.llm.gpt", "FFN_MULTIPLE", "x hidden", "cited"),
    _c("planner.llm.search", "MICRO_BATCH_SIZES", "samples", "design"),
    _c("planner.llm.search", "MAX_VIRTUAL_STAGES", "stages", "design"),
    _c("planner.llm.layout_search", "TP_SIZES", "GPUs", "design"),
    _c("planner.llm.layout_search", "CP_SIZES", "GPUs", "design"),
    _c("planner.llm.layout_search", "MICRO_BATCHES", "sequences", "design"),
    _c("planner.llm.layout_search", "MAX_PP", "stages", "design"),
    _c("planner.llm.layout_search", "MAX_VP", "stages", "design"),
    _c("planner.llm.layout_search", "DEFAULT_SEQ_LEN", "tokens", "design"),
    _c("planner.llm.layout_search", "DEFAULT_SEQUENCES_PER_GPU", "sequences", "design"),
    _c("planner.llm.recovery", "CANDIDATE_NODE_COUNTS", "node counts", "design"),
    _c("planner.llm.recovery_run", "STUDY_MTBF_H", "h", "design"),
    _c("planner.llm.recovery_run", "STUDY_NODES", "nodes", "design"),
    _c("planner.llm.recovery_run", "STUDY_INTERVALS_S", "s", "design"),
    _c("planner.llm.transformer_plan", "GPT_SEQUENCES", "sequences", "cited"),
    _c("planner.llm.transformer_plan", "DEFAULT_SIMULATE_TOP", "schedules", "design"),
    # collective libraries: what NCCL's source leaves to the hardware
    _c("costmodel.collective_libraries.transports", "HOST_LAUNCH_US", "us per GPU and call",
       "cited (the lower end of a 5-20 us range)"),
    _c("costmodel.collective_libraries.transports", "INFINIBAND_US", "us", "cited"),
    _c("costmodel.collective_libraries.fabric_fit", "BOUND_SHARE", "share of a row's time", "design"),
    _c("costmodel.collective_libraries.fabric_fit", "CONFOUNDED", "|correlation|", "design"),
    _c("costmodel.collective_libraries.fabric_fit", "DETERMINED", "standard deviation", "design"),
    # simulator and recovery
    _c("sim.recovery", "FLEET_NODE_MTBF_S", "s", "derived"),
    _c("sim.buckets", "DEFAULT_BUCKET_CAP", "bytes", "cited"),
    _c("sim.traced_step", "SIM_ELEMENT_BYTES", "bytes", "design"),
    _c("sim.nccl_flows", "MAX_ALLTOALL_RANKS", "ranks", "design"),
    # compression and the adaptive hooks
    _c("compression.moo_config", "PAPER_CANDIDATES", "fraction of elements kept", "cited"),
    _c("compression.moo", "SCREEN_POINTS", "ratios", "design"),
    _c("real_backend.hooks", "DEFAULT_PRIOR_LATENCY_S", "s", "design"),
    _c("real_backend.hooks", "DEFAULT_PRIOR_BANDWIDTH_BPS", "bytes/s", "design"),
    _c("real_backend.hooks", "AGREEMENTS_IN_FLIGHT", "agreements", "design"),
    # the testbed and its replay
    _c("real_backend.testbed", "GOODPUT_FACTOR", "fraction of the tc rate", "derived"),
    _c("real_backend.testbed", "MIN_BURST_BYTES", "bytes", "design"),
    _c("real_backend.testbed", "SMALL_BURST_MAX_RATE_BPS", "bytes/s", "design"),
    _c("real_backend.testbed", "SMALL_BURST_MIN_BYTES", "bytes", "design"),
    _c("real_backend.testbed", "TBF_QUEUE_S", "s", "design"),
    _c("real_backend.testbed", "GSO_MAX_BYTES", "bytes", "cited"),
    _c("real_backend.trace_replay", "RENDEZVOUS_DELAYS", "one-way delays per step", "derived"),
    _c("real_backend.validate", "FIT_WINDOW", "x size", "design"),
    _c("real_backend.validate", "BURST_MULTIPLE", "tbf buckets", "design"),
    # user models
    _c("workloads.user_model", "EXAMPLE_BATCH", "samples", "design"),
    _c("workloads.user_model", "DEFAULT_SEQUENCE", "tokens", "design"),
    _c("workloads.user_model", "DEFAULT_IMAGE", "pixels", "design"),
    # the learned controller's observation scales
    _c("controller.env", "LOG10_C_CENTRE", "log10 ratio", "design"),
    _c("controller.env", "TIME_REF_S", "s", "design"),
)


def reference_fits() -> list[dict[str, str]]:
    """Values fitted on reference rows, as the reference tables record them (``fitted_on`` of
    ``validation/references/*.csv``): the "ViT" size of Tyagi & Swany's Table IV."""
    rows = reference_rows("tyagi-swany-2023-models")
    return [{"name": f"experiments.tyagi_table4.MODELS['{r['model']}'].params", "value": r["params"],
             "unit": "parameters", "kind": "fitted", "fitted_on": r["fitted_on"], "source": r["params_source"]}
            for r in rows if r["fitted_on"]]


def borrowed_catalog_values() -> list[dict[str, str]]:
    """Catalog values a device borrows from a sibling (a measured matmul rate of another memory configuration)."""
    return [{"name": f"costmodel/devices.yaml {name}.mamf.bf16", "value": f"{device.mamf.tflops:g}",
             "unit": "TFLOP/s", "kind": "borrowed", "fitted_on": "", "source": device.mamf.borrowed_from}
            for name, device in catalog().items() if device.mamf is not None and device.mamf.borrowed_from]


def table() -> list[dict[str, str]]:
    """Every registered number as rows (name, value, unit, kind, fitted_on, source)."""
    rows = [{"name": c.name, "value": _format(c.value), "unit": c.unit, "kind": c.kind, "fitted_on": c.fitted_on,
             "source": c.source} for c in CONSTANTS]
    return rows + reference_fits() + borrowed_catalog_values()


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_format(v)}" for k, v in value.items())
    return str(value)
