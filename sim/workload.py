"""Named training workloads for the simulator: a model's layers plus the batch one rank trains on.

The simulator needs per-layer parameter counts (what each gradient bucket sends) and forward FLOPs
(what each layer costs); both come from :mod:`costmodel.compute`, so the simulator prices compute
exactly as the cost model does. The zoo models get a default batch per rank typical of data-parallel
training on one modern GPU (ResNet-50 at 256 is NVIDIA's DeepLearningExamples A100 setting). The
small models of the ``workloads`` package (``mlp-digits``, ``resnet-synthetic``, ...) are also
accepted: their layers are counted off the real torch module, so simulated and emulated runs talk
about the same network (importing them needs torch, so it happens only when such a name is asked for).
A user's own model is named as its factory, ``module.path:factory`` or ``path/to/file.py:factory``
(:mod:`workloads.user_model`), and counted the same way; a user's profiled step as its PyTorch profiler trace,
``path/to/trace.json`` (:mod:`sim.traced_step`: measured compute, DDP's measured buckets).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexcomm.costmodel.compute import MODEL_ZOO, ModelSpec, get_model
from flexcomm.costmodel.errors import InputError
from flexcomm.sim.traced_step import profile_of, traced_model
from flexcomm.workloads.names import FACTORY_FORM, WORKLOADS, is_factory_reference, is_trace_reference

#: Samples per rank per iteration when none is given (a sample of transformer-1.3b is one 2048-token sequence).
DEFAULT_BATCH: dict[str, int] = {
    "resnet18": 256,
    "resnet50": 256,
    "vgg16": 128,
    "alexnet": 256,
    "transformer-1.3b": 8,
}


@dataclass(frozen=True)
class TrainingWorkload:
    """A model (layers in forward order) and the batch each rank processes per iteration."""

    name: str
    model: ModelSpec
    batch_per_rank: float
    description: str = ""
    #: a profiled step (:mod:`sim.traced_step`): each parameter layer is one of DDP's measured buckets, so the
    #: simulator exchanges exactly those instead of re-bucketing
    measured_buckets: bool = False
    #: measured work after the exchange (DDP's copy back, the optimizer), added to the config's optimizer_s
    after_exchange_s: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.batch_per_rank, (int, float)) and self.batch_per_rank > 0):
            raise InputError("batch_per_rank", self.batch_per_rank, "a positive number of samples per rank")

    def with_batch(self, batch_per_rank: float | None) -> TrainingWorkload:
        """The same model at another batch per rank (None keeps the default)."""
        if batch_per_rank is None:
            return self
        if self.measured_buckets:
            raise InputError("batch", batch_per_rank, f"no batch with a profiled step ({self.name} was measured "
                             "at its own batch)")
        return TrainingWorkload(self.name, self.model, float(batch_per_rank), self.description)


def traced_training_workload(profile, compute_scale: float = 1.0) -> TrainingWorkload:  # profile: StepProfile
    """A profiled step (:class:`sim.traced_step.StepProfile`) as a workload: its measured buckets and the work
    after them, every measured time times ``compute_scale``."""
    model = traced_model(profile, compute_scale)
    return TrainingWorkload(model.name, model, 1.0, model.description, measured_buckets=True,
                            after_exchange_s=profile.after_s * compute_scale)


def _package_names() -> list[str]:
    return list(WORKLOADS)


def workload_names() -> list[str]:
    """Every name :func:`get_training_workload` accepts (zoo first)."""
    return [*sorted(MODEL_ZOO), *_package_names()]


def get_training_workload(name: str | TrainingWorkload, batch_per_rank: float | None = None) -> TrainingWorkload:
    """A workload by name: a :data:`costmodel.compute.MODEL_ZOO` model or a ``workloads`` package model."""
    if isinstance(name, TrainingWorkload):
        return name.with_batch(batch_per_rank)
    key = str(name).strip().lower()
    if key in MODEL_ZOO:
        model = get_model(key)
        return TrainingWorkload(key, model, float(DEFAULT_BATCH.get(key, 32)), model.description).with_batch(
            batch_per_rank)
    if is_trace_reference(name):  # a profiled step: path/to/trace.json[.gz]

        return traced_training_workload(profile_of(str(name).strip())).with_batch(batch_per_rank)
    if is_factory_reference(name):  # the user's own model: module.path:factory or file.py:factory
        from flexcomm.workloads.user_model import build_user_model

        user = build_user_model(str(name).strip())
        return TrainingWorkload(user.name, user.spec(), float(user.batch_size),
                                f"{user.reference}, {user.input_text}").with_batch(
            batch_per_rank)
    names = _package_names()
    if key in names:
        from flexcomm.workloads.registry import get_workload

        workload = get_workload(key)
        spec = workload.spec()
        return TrainingWorkload(key, spec, float(workload.batch_size), workload.description).with_batch(
            batch_per_rank)
    raise InputError("workload", name, "one of " + ", ".join([*sorted(MODEL_ZOO), *names])
                     + f", your model as {FACTORY_FORM}, or a profiler trace as path/to/trace.json")

