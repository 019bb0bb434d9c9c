"""flexcomm: a workbench for communication-efficient distributed deep-learning training.

The public API, one import away (every size, time and bandwidth may be a unit string or a number in
bytes, seconds, bytes/s; bad input raises :class:`InputError`, whose text is the CLI's one line)::

    import flexcomm

    flexcomm.cost("allreduce", "ring", ranks=8, size="64MiB", latency="10us", bandwidth="10Gbit/s")
    flexcomm.cost(scheme="topk-ar", ratio=0.01, ranks=8, size="100MiB", cluster="8x1-v100-40g")
    model = flexcomm.CostModel.from_cluster(flexcomm.load_cluster("4x8-a100-ib"))
    model.collective("allreduce", "hierarchical", "256MiB", 32).total       # seconds
    flexcomm.predict("allreduce", "ring", sizes, 64, latency="10us", bandwidth="10Gbit/s")  # numpy arrays
    flexcomm.simulate("4x8-a100-ib", "resnet50", iterations=20, faults=["node3@1s"], checkpoint_every=5)
    flexcomm.simulate("dgx-h100", "trace.json", ranks=16)  # your torch.profiler trace of DDP steps, replayed
    flexcomm.emulate("mlp-digits", strategies=["dense", "flexible"], steps=100)
    flexcomm.hooks.register(ddp_model, "flexible", 0.01, cluster="8x1-10gbe")  # a DDP communication hook
    flexcomm.plan("resnet50", "4x8-a100-ib", batch_size=1024).frame   # every command that writes tables and
    flexcomm.recovery("gpt-1.7b", "4x4-a100-v100", horizon="2d").figures  # figures: plan, place, scenario,
    # recovery, validate_nccl_tests, validate_published; keywords are the CLI's flags (batch_size=--batch-size)
    flexcomm.plan(job="job.yaml")   # one job file (flexcomm.load_job), read as simulate and whatif read it
    flexcomm.plan_layouts("deepseek-v3", "dgx-h100", gpus=1024, batch_size=8192, precision="fp8").best.layout
    flexcomm.validate_published_llm()   # NVIDIA's published LLM throughput, predicted beside the naive baseline

Submodules (``flexcomm.costmodel``, ``flexcomm.sim``, ``flexcomm.emulation``, ``flexcomm.compression``,
``flexcomm.real_backend``, ``flexcomm.planner``, ``flexcomm.placement``, ``flexcomm.controller``,
``flexcomm.experiments``, ``flexcomm.workloads``) hold the engines; the names here are the stable surface.
Attributes load lazily: ``import flexcomm`` imports neither torch nor scipy.
"""

from __future__ import annotations

import os
import platform
from typing import TYPE_CHECKING

#: torch on the CPU picks its kernels by the CPU: ATen's vector width, MKL's GEMM code path and oneDNN's JIT ISA.
#: Each rounds sums differently, so the same seed trained to different numbers on AVX-512, AVX2 and AMD machines
#: (the emulated runs the docs quote). Every x86 process of the package pins all three to one path every x86 CPU
#: of the last decade runs: ATen's AVX2 kernels, MKL's conditional numerical reproducibility (COMPATIBLE: the
#: same results on any Intel or compatible processor) and oneDNN capped at AVX2. A setting of your own wins.
#: Set before torch runs its first kernel (``tests/conftest.py`` imports the package first).
REPRODUCIBLE_CPU_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
if platform.machine().lower() in ("x86_64", "amd64"):
    for _name, _value in REPRODUCIBLE_CPU_KERNELS.items():
        os.environ.setdefault(_name, _value)

from flexcomm._lazy import lazy_getattr  # noqa: E402 - after the numerics are pinned
from flexcomm.costmodel.errors import InputError, RunStoppedError  # noqa: E402

__version__ = "0.1.0"

#: public name -> module that defines it (imported on first use)
_LAZY: dict[str, str] = {
    "cost": "flexcomm._pricing",
    "Cost": "flexcomm._pricing",
    "predict": "flexcomm.costmodel.collectives",
    "CostModel": "flexcomm.costmodel.cost_model",
    "LinkParams": "flexcomm.costmodel.cost_model",
    "load_cluster": "flexcomm.costmodel.cluster",
    "Cluster": "flexcomm.costmodel.cluster",
    "Job": "flexcomm.costmodel.job",
    "load_job": "flexcomm.costmodel.job",
    "cluster_names": "flexcomm.costmodel.cluster",
    "calibrate": "flexcomm._pricing",
    "calibrate_fabric": "flexcomm._pricing",
    "CalibrationProfile": "flexcomm.costmodel.calibration",
    "simulate": "flexcomm._running",
    "simulate_collective": "flexcomm._running",
    "emulate": "flexcomm._running",
    "study": "flexcomm._running",
    "plan": "flexcomm._engines",
    "place": "flexcomm._engines",
    "scenario": "flexcomm._simulations",
    "recovery": "flexcomm._simulations",
    "validate_nccl_tests": "flexcomm._validations",
    "validate_published": "flexcomm._validations",
    "architecture": "flexcomm._llm",
    "plan_layouts": "flexcomm._llm",
    "validate_published_llm": "flexcomm._llm",
    "CommandResult": "flexcomm._result",
    "parse_size": "flexcomm.costmodel.units",
    "parse_time": "flexcomm.costmodel.units",
    "parse_bandwidth": "flexcomm.costmodel.units",
    "format_size": "flexcomm.costmodel.units",
    "format_time": "flexcomm.costmodel.units",
    "format_bandwidth": "flexcomm.costmodel.units",
}
_SUBMODULES = ("hooks", "costmodel", "sim", "emulation", "compression", "real_backend", "planner", "placement",
               "controller", "experiments", "workloads")

__all__ = [  # a literal list (tools read it statically); tests/test_api.py keeps it equal to _LAZY's keys
    "Cluster", "CalibrationProfile", "CommandResult", "Cost", "CostModel", "InputError", "Job", "LinkParams",
    "RunStoppedError", "__version__", "calibrate", "calibrate_fabric", "cluster_names", "cost", "emulate",
    "format_bandwidth", "format_size", "format_time", "hooks", "load_cluster", "load_job", "parse_bandwidth",
    "parse_size",
    "parse_time", "place", "plan", "predict", "recovery", "scenario", "simulate", "simulate_collective", "study",
    "validate_nccl_tests", "validate_published", "architecture", "plan_layouts", "validate_published_llm",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from flexcomm import hooks
    from flexcomm._engines import place, plan
    from flexcomm._llm import architecture, plan_layouts, validate_published_llm
    from flexcomm._pricing import Cost, calibrate, calibrate_fabric, cost
    from flexcomm._result import CommandResult
    from flexcomm._running import emulate, simulate, simulate_collective, study
    from flexcomm._simulations import recovery, scenario
    from flexcomm._validations import validate_nccl_tests, validate_published
    from flexcomm.costmodel.calibration import CalibrationProfile
    from flexcomm.costmodel.cluster import Cluster, cluster_names, load_cluster
    from flexcomm.costmodel.collectives import predict
    from flexcomm.costmodel.cost_model import CostModel, LinkParams
    from flexcomm.costmodel.job import Job, load_job
    from flexcomm.costmodel.units import (
        format_bandwidth,
        format_size,
        format_time,
        parse_bandwidth,
        parse_size,
        parse_time,
    )


__getattr__ = lazy_getattr("flexcomm", _LAZY, globals(), _SUBMODULES)


def __dir__() -> list[str]:
    """The API only: not the machinery that builds it (``TYPE_CHECKING``, ``annotations``, ``lazy_getattr``)."""
    return sorted(set(__all__) | set(_SUBMODULES))
