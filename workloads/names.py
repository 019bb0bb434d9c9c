"""Workload names, importable without torch (a command checks ``--workload`` before importing it)."""

from __future__ import annotations

#: Every name :func:`workloads.registry.get_workload` accepts, in a stable order (smallest first).
WORKLOADS: tuple[str, ...] = (
    "mlp-digits",
    "resnet-digits",
    "eca-resnet-digits",
    "fashion-cnn",
    "fashion-resnet8",
    "fashion-eca-resnet8",
    "resnet-synthetic",
    "eca-resnet-synthetic",
    "lstm-seq",
    "transformer-seq",
)


#: Workloads that read Fashion-MNIST (Debian's dataset-fashion-mnist, ``make data``).
FASHION_WORKLOADS: tuple[str, ...] = ("fashion-cnn", "fashion-resnet8", "fashion-eca-resnet8")


def canonical_workload(name: object) -> str:
    """``name`` as the registry keys it (case and surrounding spaces ignored); unknown names unchanged."""
    return str(name).strip().lower()


#: How a user's own model is named wherever a workload or model is asked for (errors and help say it alike).
FACTORY_FORM = "module.path:factory or path/to/file.py:factory"


def is_factory_reference(name: object) -> bool:
    """Whether ``name`` is the user's own model as ``module.path:factory`` or ``path/to/file.py:factory`` (one
    colon, an identifier after it), not a workload name."""
    if not isinstance(name, str) or name.strip().count(":") != 1:
        return False
    where, factory = name.strip().rsplit(":", 1)
    return bool(where) and factory.isidentifier()


def is_trace_reference(name: object) -> bool:
    """Whether ``name`` is a PyTorch profiler trace (``path/to/trace.json`` or ``.json.gz``), not a workload name."""
    return isinstance(name, str) and name.strip().lower().endswith((".json", ".json.gz"))


def workload_label(name: str) -> str:
    """How a figure names a workload: a factory by its name, a trace by its file name, else the name itself."""
    if is_trace_reference(name):
        return name.strip().replace("\\", "/").rsplit("/", 1)[-1]
    if is_factory_reference(name):
        return name.strip().rsplit(":", 1)[-1]
    return name
