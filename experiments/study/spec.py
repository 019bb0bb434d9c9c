"""The study file: what to sweep, validated with errors that name the field, expanded into points.

A study file is YAML (or JSON)::

    name: small-whatif
    engine: model                 # model (cost model) | sim (discrete-event simulator) | emulated (real gradients)
                                  # | recovery (goodput of a transformer job over days of failures)
    cluster: 8x1-10gbe            # embedded name or file; or {base: NAME|FILE, override: {inter_link: {...}}}
    workload: resnet50            # MODEL_ZOO model (model, sim), workloads-package name (emulated, sim, model),
                                  # your own module.path:factory / file.py:factory (model, sim) or your
                                  # profiled step, path/to/trace.json (model, sim; `simulate --from-trace`)
    strategies: [dense, topk-ag, topk-ar]
    sweep:                        # axis -> values; the points are the cartesian product
      bandwidth: [1Gbit/s, 10Gbit/s, 100Gbit/s]
      latency: [10us, 1ms]
      ranks: [8, 64]
      ratio: [0.1, 0.01, 0.001]
    seed: 0
    metrics: [step_time_s, comm_time_s, speedup_vs_dense]

A ``recovery`` study compares recovery policies (its ``strategies``: restart, shrink, replan,
replan+grow) for a ``gpt-<row>`` job of Megatron-LM's Table 1, over the axes ``mtbf`` (required),
``nodes``, ``checkpoint_interval`` (durations or ``young-daly``), ``horizon``, ``storage_bandwidth``,
``repair_time`` and ``planning_time`` (``measured``, the default, or a fixed charge per re-plan)::

    name: recovery-week
    engine: recovery
    cluster: dgx-a100-80g
    workload: gpt-18.4b
    strategies: [restart, shrink, replan, replan+grow]
    sweep: {mtbf: [12h, 2d], nodes: [16, 64], checkpoint_interval: [30min, young-daly]}

Every problem is an :class:`~costmodel.errors.InputError` whose field is the dotted path into the file
(``sweep.bandwidth[1]``, ``strategies[2]``, ``cluster.override.inter_link.bandwidth``).

Why points carry their own id and seed: a point's id is a hash of everything that determines its result
and its seed a hash of the study seed and the point's *setting* (workload, ranks, batch, steps, repeat),
so results never depend on scheduling order or on which worker ran a point, a journal row can be matched
to its point on resume, and strategies, ratios and networks compared at one setting see the same initial
model and data (common random numbers; ``repeats`` gives independent replicates).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from flexcomm.costmodel.cluster import Cluster, load_cluster
from flexcomm.costmodel.compute import MODEL_ZOO
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.job import load_job
from flexcomm.costmodel.limits import MAX_RECOVERY_FAILURES, MAX_STUDY_POINTS
from flexcomm.costmodel.units import format_duration, parse_bandwidth, parse_time
from flexcomm.planner.llm.recovery import recovery_workloads
from flexcomm.sim.recovery import CAUSES, POLICIES, RecoveryConfig
from flexcomm.sim.traced_step import profile_of
from flexcomm.sim.workload import workload_names
from flexcomm.workloads.names import is_factory_reference, is_trace_reference

TRAINING_ENGINES = ("model", "sim", "emulated")
ENGINES = (*TRAINING_ENGINES, "recovery")
SPARSE_SCHEMES = ("dense", "topk-ag", "topk-ar")
ENGINE_STRATEGIES: dict[str, tuple[str, ...]] = {
    "model": SPARSE_SCHEMES,
    "sim": SPARSE_SCHEMES,
    "emulated": ("dense", "topk-ag", "topk-ar", "flexible", "moo"),
    "recovery": POLICIES,
}
#: Strategies that pick (or need) no compression ratio: one point per setting, ratio left empty.
RATIO_FREE = frozenset({"dense", "moo"})
DEFAULT_CLUSTER = "8x1-v100-40g"
DEFAULT_CLUSTERS = {"recovery": "dgx-a100-80g"}
DEFAULT_WORKLOAD = {"model": "resnet50", "sim": "resnet50", "emulated": "mlp-digits", "recovery": "gpt-18.4b"}
DEFAULT_RATIO = 0.01
DEFAULT_STEPS = {"sim": 5, "emulated": 100}
DEFAULT_EMULATED_RANKS = 4
NAME_FORM = "a non-empty name of letters, digits, '-', '_' or '.'"


@dataclass(frozen=True)
class Metric:
    """A result column: which engines produce it and which way is better (for winners)."""

    engines: tuple[str, ...]
    goal: Literal["min", "max"]
    label: str
    derived: bool = False


_RECOVERY = ("recovery",)
METRICS: dict[str, Metric] = {
    "step_time_s": Metric(TRAINING_ENGINES, "min", "step time (s)"),
    "comm_time_s": Metric(TRAINING_ENGINES, "min", "communication per step (s)"),
    "compute_time_s": Metric(TRAINING_ENGINES, "min", "compute per step (s)"),
    "compress_time_s": Metric(TRAINING_ENGINES, "min", "compression per step (s)"),
    "exposed_comm_s": Metric(("sim",), "min", "exposed communication per step (s)"),
    "samples_per_s": Metric(TRAINING_ENGINES, "max", "samples/s"),
    "final_accuracy": Metric(("emulated",), "max", "final test accuracy"),
    "best_accuracy": Metric(("emulated",), "max", "best test accuracy"),
    "time_to_accuracy_s": Metric(("emulated",), "min", "simulated time to target accuracy (s)"),
    "sim_time_s": Metric(("emulated",), "min", "simulated training time (s)"),
    "speedup_vs_dense": Metric(TRAINING_ENGINES, "max", "speedup over dense", derived=True),
    "goodput_samples_per_s": Metric(_RECOVERY, "max", "goodput (samples/s)"),
    "ideal_samples_per_s": Metric(_RECOVERY, "max", "failure-free throughput (samples/s)"),
    "efficiency": Metric(_RECOVERY, "max", "goodput / failure-free throughput"),
    "failures": Metric(_RECOVERY, "min", "failures within the horizon"),
    **{f"lost_{cause}_s": Metric(_RECOVERY, "min", f"time lost to {cause.replace('_', ' ')} (s)") for cause in CAUSES},
    "planner_search_s": Metric(_RECOVERY, "min", "measured planner search (s)"),
    "checkpoint_interval_s": Metric(_RECOVERY, "min", "checkpoint interval (s)"),
}
DEFAULT_METRICS = {
    "model": ["step_time_s", "comm_time_s", "speedup_vs_dense"],
    "sim": ["step_time_s", "exposed_comm_s", "speedup_vs_dense"],
    "emulated": ["step_time_s", "final_accuracy", "time_to_accuracy_s"],
    "recovery": ["goodput_samples_per_s", "efficiency", "lost_lost_work_s"],
}
DEFAULT_WINNER = {"recovery": "goodput_samples_per_s"}


def engine_metrics(engine: str) -> list[str]:
    """Every metric an engine produces, in table order (the journal keeps them all)."""
    return [name for name, m in METRICS.items() if engine in m.engines]


# --- sweep axes ----------------------------------------------------------------------------------


def _whole(value: Any, field: str, form: str = "an integer >= 1") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(field, value, form)
    return int(value)


def _ratio(value: Any, field: str) -> float:
    form = "a fraction of elements kept in (0, 1], e.g. 0.01"
    if isinstance(value, str):
        try:
            value = float(value)  # YAML 1.1 reads 1e-3 as a string
        except ValueError:
            raise InputError(field, value, form) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and 0 < value <= 1):
        raise InputError(field, value, form)
    return float(value)


def _positive_time(value: Any, field: str) -> float:
    seconds = parse_time(value, field)
    if seconds <= 0:
        raise InputError(field, value, "a positive duration such as 2d or 4h")
    return seconds


def _duration_label(seconds: float) -> str:
    """``1800`` -> ``30min``: a readable table cell that parses back to exactly the same seconds."""
    label = format_duration(seconds, sep="")
    return label if parse_time(label) == seconds else f"{seconds:g}s"


def _word_or_duration(word: str, parse: Callable[[Any, str], float], form: str) -> Callable[[Any, str], str]:
    """A parser of table labels: ``word`` itself, or a duration ``parse`` accepts, written as its label."""
    def parse_label(value: Any, field: str) -> str:
        if isinstance(value, str) and value.strip().lower() == word:
            return word
        try:
            return _duration_label(parse(value, field))
        except InputError:
            raise InputError(field, value, form) from None

    return parse_label


#: A checkpoint interval: a positive duration, or ``young-daly`` (resolved per point).
_interval = _word_or_duration("young-daly", _positive_time, "a positive interval such as 30min, or young-daly "
                              "(every policy restarts from a checkpoint)")
#: What a re-plan is charged: ``measured`` (the planner's own search time) or a fixed duration.
_planning = _word_or_duration("measured", parse_time, "measured or a duration >= 0 such as 30s")


def _storage(value: Any, field: str) -> float:
    rate = parse_bandwidth(value, field)
    if rate <= 0:
        raise InputError(field, value, "a positive storage bandwidth such as 10GB/s")
    return rate


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, value, "a workload name such as resnet50 or mlp-digits")
    if is_factory_reference(value) or is_trace_reference(value):  # a path keeps its case
        return value.strip()
    return value.strip().lower()


@dataclass(frozen=True)
class Axis:
    """A sweepable parameter: its table column, parser, expected form and engines."""

    column: str
    parse: Callable[[Any, str], Any]
    form: str
    engines: tuple[str, ...] = TRAINING_ENGINES


AXES: dict[str, Axis] = {
    "bandwidth": Axis("bandwidth_Bps", parse_bandwidth, "bandwidths such as [1Gbit/s, 10Gbit/s] (the inter-node link)"),
    "latency": Axis("latency_s", parse_time, "latencies such as [10us, 1ms] (the inter-node link)"),
    "ranks": Axis("ranks", _whole, "rank counts such as [8, 64] (emulated: logical workers)"),
    "ratio": Axis("ratio", _ratio, "fractions of elements kept such as [0.1, 0.01]"),
    "batch": Axis("batch", _whole, "per-rank batch sizes such as [32, 128]"),
    "steps": Axis("steps", _whole, "step counts such as [50, 200] (sim: iterations)", ("sim", "emulated")),
    "workload": Axis("workload", _name, "workload names such as [resnet50, vgg16]", ENGINES),
    "mtbf": Axis("mtbf_s", _positive_time, "node MTBFs such as [12h, 2d]", _RECOVERY),
    "nodes": Axis("nodes", _whole, "job sizes in nodes such as [16, 128]", _RECOVERY),
    "checkpoint_interval": Axis("checkpoint_interval", _interval,
                                "checkpoint intervals such as [30min, 2h, young-daly]", _RECOVERY),
    "horizon": Axis("horizon_s", _positive_time, "simulated spans such as [1d, 7d]", _RECOVERY),
    "storage_bandwidth": Axis("storage_Bps", _storage, "checkpoint storage bandwidths such as [2GB/s, 10GB/s]",
                              _RECOVERY),
    "repair_time": Axis("repair_s", parse_time, "repair times such as [1h, 4h]", _RECOVERY),
    "planning_time": Axis("planning_time", _planning, "re-plan charges such as [measured, 30s]", _RECOVERY),
}
#: The recovery engine's axes besides the workload, in table order.
RECOVERY_AXES = ("nodes", "mtbf", "checkpoint_interval", "horizon", "storage_bandwidth", "repair_time",
                 "planning_time")
#: What a recovery point uses for an axis the file does not sweep (the simulator's stated defaults).
RECOVERY_DEFAULTS: dict[str, Any] = {
    "checkpoint_interval": _duration_label(RecoveryConfig.checkpoint_every_s), "horizon": 7 * 86400.0,
    "repair_time": RecoveryConfig.repair_s, "planning_time": "measured",
}


# --- the file's shape (pydantic), then its meaning (by hand, with paths) -----------------------


class _ClusterRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: str = DEFAULT_CLUSTER
    override: dict[str, Any] = {}


class _SpecFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    engine: Literal["model", "sim", "emulated", "recovery"] = "model"
    cluster: str | _ClusterRef | None = None
    workload: str | None = None
    job: str | None = None  # a job file (docs/jobs.md): read by _with_job before this model sees the file
    strategies: list[str]
    sweep: dict[str, list[Any]] = {}
    seed: int = 0
    repeats: int = 1
    metrics: list[str] | None = None
    target_accuracy: float = 0.9
    winner_metric: str | None = None

    @field_validator("seed", "repeats", "target_accuracy", mode="before")
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # YAML's yes/true is never a seed or a count; pydantic would read it as 1
            raise ValueError("a number, not a boolean")
        return value


_FORMS: dict[str, str] = {
    "name": NAME_FORM,
    "description": "a one-line string",
    "engine": "one of " + ", ".join(ENGINES),
    "cluster": "an embedded cluster name, a cluster file, or {base: NAME|FILE, override: {...}}",
    "base": "an embedded cluster name or a cluster file",
    "override": "a mapping of cluster keys, e.g. {inter_link: {bandwidth: 25Gbit/s}}",
    "workload": "a workload name such as resnet50 or mlp-digits",
    "strategies": "a list such as [dense, topk-ag, topk-ar]",
    "sweep": "a mapping of axis -> list of values, axes: " + ", ".join(AXES),
    "seed": "an integer >= 0",
    "repeats": "an integer >= 1 (independent replicates of every point)",
    "metrics": "a list of " + ", ".join(METRICS),
    "target_accuracy": "a test accuracy in (0, 1] for time_to_accuracy_s",
    "winner_metric": "one of the study's metrics",
}


class _Nothing:
    """A missing value in messages: ``got nothing``."""

    def __repr__(self) -> str:
        return "nothing"


_NOTHING = _Nothing()


def _dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "_ClusterRef"):
            continue  # pydantic's union-branch labels are not keys of the file
        else:
            out += ("." if out else "") + str(part)
    return out or "study"


def _translate(exc: ValidationError) -> InputError:
    errors = exc.errors()
    # A union (cluster: str | mapping) reports one error per branch; the mapping branch says more.
    err = next((e for e in errors if "_ClusterRef" in e["loc"]), errors[0])
    loc = list(err["loc"])
    field = _dotted(loc)
    if err["type"] == "extra_forbidden":
        owner = _ClusterRef if "cluster" in loc[:1] else _SpecFile
        return InputError(field, err.get("input"), "no such key; known keys here: " + ", ".join(owner.model_fields))
    if not loc:
        return InputError("study", err.get("input"), "a mapping with keys " + ", ".join(_SpecFile.model_fields))
    key = next((p for p in reversed(loc) if isinstance(p, str) and p in _FORMS), str(loc[0]))
    if key == "sweep" and len([p for p in loc if p not in ("str",)]) >= 2:
        axis = loc[1]
        return InputError(field, err.get("input"), f"a list of {AXES[axis].form}" if axis in AXES
                          else "a list of values")
    got = _NOTHING if err["type"] == "missing" else err.get("input")
    return InputError(field, got, _FORMS[key])


# --- the validated study -------------------------------------------------------------------------


def _hash(payload: Any, length: int = 16) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def derive_seed(study_seed: int, setting: Mapping[str, Any]) -> int:
    """A 31-bit seed from the study seed and a point's setting: a pure function, never scheduling."""
    return int(_hash({"study_seed": study_seed, **setting}, 8), 16) % 2**31


@dataclass(frozen=True)
class Point:
    """One run: ``params`` are the journal's parameter columns (SI units); ``id`` hashes them and the cluster."""

    id: str
    index: int
    params: dict[str, Any]


@dataclass
class StudySpec:
    """A validated study: resolved cluster (SI dict), parsed axes, the points they expand to."""

    name: str
    engine: str
    cluster: dict[str, Any]
    workloads: list[str]
    strategies: list[str]
    axes: dict[str, list[Any]]
    seed: int
    repeats: int
    metrics: list[str]
    target_accuracy: float
    winner_metric: str
    description: str = ""
    source: str = ""
    points: list[Point] = field(default_factory=list)

    @property
    def swept(self) -> list[str]:
        """Table columns of the axes the file sweeps (more than one value), in the file's order."""
        cols = [AXES[a].column for a, values in self.axes.items() if len(values) > 1]
        if len(self.workloads) > 1 and "workload" not in cols:
            cols.insert(0, "workload")
        if self.repeats > 1:
            cols.append("repeat")
        return cols

    @property
    def param_columns(self) -> list[str]:
        if self.engine == "recovery":
            cols = ["strategy", "workload", *(AXES[a].column for a in RECOVERY_AXES)]
        else:
            cols = ["strategy", "workload", "ranks", "ratio", "bandwidth_Bps", "latency_s", "batch"]
        if self.engine in ("sim", "emulated"):
            cols.append("steps")
        return [*cols, "repeat", "seed"]

    @property
    def setting_columns(self) -> list[str]:
        """Columns that, with the strategy (and ratio), identify a configuration; the seed is a function of them."""
        return [c for c in self.param_columns if c not in ("strategy", "ratio", "seed")]

    @property
    def journal_columns(self) -> list[str]:
        """results.csv columns: point id, parameters, every metric of the engine, wall time."""
        return ["point_id", *self.param_columns, *engine_metrics(self.engine), "wall_s"]

    @property
    def spec_hash(self) -> str:
        """What the results depend on: the set of point ids (each hashes its parameters and the cluster)."""
        return _hash(sorted(p.id for p in self.points), 32)

    def describe(self) -> dict[str, Any]:
        """JSON-safe description written to ``study.json``."""
        return {
            "name": self.name, "description": self.description, "engine": self.engine, "source": self.source,
            "cluster": self.cluster, "workloads": self.workloads, "strategies": self.strategies,
            "axes": self.axes, "seed": self.seed, "repeats": self.repeats, "metrics": self.metrics,
            "target_accuracy": self.target_accuracy, "winner_metric": self.winner_metric,
            "points": len(self.points), "spec_hash": self.spec_hash,
        }


#: A cluster file may say ``bandwidth`` where the resolved cluster says ``bandwidth_Bps``: the same field.
_ALIASES = {"bandwidth": "bandwidth_Bps", "latency": "latency_s", "memory": "memory_bytes"}
_ALIASES.update({v: k for k, v in list(_ALIASES.items())})


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in override.items():
        if key in _ALIASES:
            out.pop(_ALIASES[key], None)
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


def _resolve_cluster(ref: str | _ClusterRef, folder: Path) -> dict[str, Any]:
    base, override, field = (ref, {}, "cluster") if isinstance(ref, str) else (ref.base, ref.override, "cluster.base")
    local = folder / base
    try:
        cluster = load_cluster(str(local) if local.is_file() else base)
    except InputError as exc:
        raise InputError(field, exc.got, exc.expected) from None
    if not override:
        return cluster.to_dict()
    try:
        merged = Cluster.from_dict(_merge(cluster.to_dict(), override))
    except InputError as exc:
        inner = exc.field.removeprefix("cluster").lstrip(".")
        raise InputError("cluster.override" + (f".{inner}" if inner else ""), exc.got, exc.expected) from None
    return merged.to_dict()


def _beside(name: str, folder: Path | None) -> str:
    """A trace named relative to the study file is found beside it (as its cluster file is)."""
    if folder is not None and is_trace_reference(name) and not Path(name).is_absolute() \
            and (folder / name).is_file():
        return str(folder / name)
    return name


def _check_workload(name: str, engine: str, field: str) -> str:
    if engine == "emulated":
        from flexcomm.workloads.registry import WORKLOADS

        known = list(WORKLOADS)
    elif engine == "recovery":

        known = list(recovery_workloads())
    elif name in MODEL_ZOO:
        return name
    elif is_factory_reference(name):  # the user's own model (model and sim engines): built now, so a bad one fails here
        from flexcomm.workloads.user_model import build_user_model

        build_user_model(name)
        return name
    elif is_trace_reference(name):  # a profiled step (model and sim engines): read now, so a bad trace fails here

        profile_of(name)
        return name
    else:

        known = workload_names()
    if name not in known:
        raise InputError(field, name, "one of " + ", ".join(known) + f" (engine {engine})")
    return name


def _parse_sweep(raw: Mapping[str, list[Any]], engine: str) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    for name, values in raw.items():
        if name not in AXES:
            raise InputError(f"sweep.{name}", values, "an axis, one of " + ", ".join(AXES))
        axis = AXES[name]
        if engine not in axis.engines:
            raise InputError(f"sweep.{name}", values,
                             f"an axis of the {' or '.join(axis.engines)} engine (this study's engine is {engine})")
        if not values:
            raise InputError(f"sweep.{name}", values, f"a non-empty list of {axis.form}")
        parsed: list[Any] = []
        for i, value in enumerate(values):
            try:
                v = axis.parse(value, f"sweep.{name}[{i}]")
            except InputError as exc:  # the unit parsers name their own field; the file's path is what helps
                raise InputError(f"sweep.{name}[{i}]", value, f"{exc.expected}") from None
            if v in parsed:
                raise InputError(f"sweep.{name}[{i}]", value,
                                 f"distinct values (it repeats sweep.{name}[{parsed.index(v)}])")
            parsed.append(v)
        axes[name] = parsed
    return axes


def build_spec(data: Any, source: str = "", folder: Path | None = None) -> StudySpec:
    """Validate a parsed study file; every problem is an InputError naming the dotted field."""
    if not isinstance(data, dict):
        raise InputError("study", type(data).__name__, "a mapping with keys " + ", ".join(_SpecFile.model_fields))
    if "jobs" in data and "strategies" not in data:
        raise InputError("study", data.get("name", "this file"), "a study file; this is a scenario of several "
                         "jobs: run it with flexcomm simulate --scenario FILE")
    if "job" in data:
        data = _with_job(data, folder)
    try:
        raw = _SpecFile.model_validate(data)
    except ValidationError as exc:
        raise _translate(exc) from None
    engine = raw.engine
    name = raw.name.strip()
    if not name or any(not (c.isalnum() or c in "-_.") for c in name):
        raise InputError("name", raw.name, NAME_FORM)
    if raw.seed < 0:
        raise InputError("seed", raw.seed, _FORMS["seed"])
    if raw.repeats < 1:
        raise InputError("repeats", raw.repeats, _FORMS["repeats"])
    if not (math.isfinite(raw.target_accuracy) and 0 < raw.target_accuracy <= 1):
        raise InputError("target_accuracy", raw.target_accuracy, _FORMS["target_accuracy"])
    allowed = ENGINE_STRATEGIES[engine]
    if not raw.strategies:
        raise InputError("strategies", [], f"a non-empty list of {', '.join(allowed)}")
    for i, strategy in enumerate(raw.strategies):
        if strategy not in allowed:
            raise InputError(f"strategies[{i}]", strategy, f"one of {', '.join(allowed)} (engine {engine})")
        if strategy in raw.strategies[:i]:
            raise InputError(f"strategies[{i}]", strategy, "distinct strategies")
    axes = _parse_sweep(raw.sweep, engine)
    if "workload" in axes and raw.workload is not None:
        raise InputError("workload", raw.workload, "either workload or sweep.workload, not both")
    if "workload" in axes:
        workloads = [_check_workload(_beside(w, folder), engine, f"sweep.workload[{i}]")
                     for i, w in enumerate(axes["workload"])]
    else:
        workloads = [_check_workload(_beside(_name(raw.workload or DEFAULT_WORKLOAD[engine], "workload"), folder),
                                     engine, "workload")]
    available = engine_metrics(engine)
    metrics = list(raw.metrics) if raw.metrics is not None else [
        m for m in DEFAULT_METRICS[engine] if m != "speedup_vs_dense" or "dense" in raw.strategies]
    if not metrics:
        raise InputError("metrics", [], "a non-empty list of " + ", ".join(available))
    for i, metric in enumerate(metrics):
        if metric not in available:
            raise InputError(f"metrics[{i}]", metric, f"one of {', '.join(available)} (engine {engine})")
        if metric in metrics[:i]:
            raise InputError(f"metrics[{i}]", metric, "distinct metrics")
        if metric == "speedup_vs_dense" and "dense" not in raw.strategies:
            raise InputError(f"metrics[{i}]", metric, "a metric the strategies allow (speedup_vs_dense needs dense)")
    if engine == "recovery" and "mtbf" not in axes:
        raise InputError("sweep.mtbf", _NOTHING, "a list of node MTBFs such as [12h, 2d] (engine recovery needs one)")
    winner = raw.winner_metric or DEFAULT_WINNER.get(engine) or (
        "time_to_accuracy_s" if "time_to_accuracy_s" in metrics else "step_time_s")
    if winner not in available:
        raise InputError("winner_metric", winner, f"one of {', '.join(available)} (engine {engine})")
    cluster = _resolve_cluster(raw.cluster or DEFAULT_CLUSTERS.get(engine, DEFAULT_CLUSTER), folder or Path("."))
    spec = StudySpec(
        name=name, engine=engine, cluster=cluster, workloads=workloads, strategies=list(raw.strategies), axes=axes,
        seed=raw.seed, repeats=raw.repeats, metrics=metrics, target_accuracy=float(raw.target_accuracy),
        winner_metric=winner, description=raw.description, source=source,
    )
    _check_point_count(spec)
    spec.points = expand(spec)
    if engine == "recovery":
        _check_horizons(spec)
    return spec


def _with_job(data: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """``job: FILE`` (docs/jobs.md) sets the study's workload, cluster, seed and batch per rank, the same job
    simulate, plan and whatif read; a key the study gives itself wins, as a flag typed beside ``--job`` does."""
    name = data["job"]
    if not isinstance(name, str) or not name.strip():
        raise InputError("job", name, "a job file (YAML or JSON), named relative to the study file")
    path = Path(name) if Path(name).is_absolute() or folder is None else folder / name
    job = load_job(path if path.is_file() or folder is None else Path(name), "job")
    if job.gpt is not None:
        raise InputError("job.model", job.model, "a model the study's engines price on their own; a gpt shape is "
                         "planned with `flexcomm plan --job FILE`")
    merged = {key: value for key, value in data.items() if key != "job"}
    merged.setdefault("workload", job.model)
    merged.setdefault("cluster", job.cluster)
    if job.seed is not None:
        merged.setdefault("seed", job.seed)
    sweep = dict(merged.get("sweep") or {})
    if job.batch_per_device is not None and merged.get("engine", "model") != "recovery":
        sweep.setdefault("batch", [job.batch_per_device])
    merged["sweep"] = sweep
    return merged


def point_count(spec: StudySpec) -> int:
    """How many points :func:`expand` makes, counted without making them: a ratio-free strategy runs once
    per setting of the other axes."""
    grids = [len(v) for a, v in spec.axes.items() if a != "workload"]
    per_workload = math.prod(grids)
    ratio_free = sum(1 for s in spec.strategies if s in RATIO_FREE) if spec.engine != "recovery" else 0
    once = per_workload // len(spec.axes["ratio"]) if "ratio" in spec.axes else per_workload
    return len(spec.workloads) * spec.repeats * (per_workload * (len(spec.strategies) - ratio_free) + once * ratio_free)


def _check_point_count(spec: StudySpec) -> None:
    """Refuse a study larger than :data:`MAX_STUDY_POINTS` before expanding it (a 7 KB file made 2e7 points,
    and expanding them alone hashed for minutes)."""
    sizes = [f"{len(v)} {a}" for a, v in spec.axes.items() if a != "workload"]
    got = " x ".join([f"{len(spec.workloads)} workloads", f"{spec.repeats} repeats", *sizes,
                      f"{len(spec.strategies)} strategies"])
    MAX_STUDY_POINTS.check("sweep", point_count(spec), got)


def _check_horizons(spec: StudySpec) -> None:
    """Each recovery point's failures within its horizon (nodes x horizon / (MTBF + repair)), within
    :data:`MAX_RECOVERY_FAILURES`, before any point is planned: ``horizon: [1e9d]`` never ended."""
    for point in spec.points:
        p = point.params
        failures = p["nodes"] * p["horizon_s"] / (p["mtbf_s"] + p["repair_s"])
        MAX_RECOVERY_FAILURES.check("sweep.horizon", failures, format_duration(p["horizon_s"]))


def shipped_studies() -> dict[str, Path]:
    """The example studies shipped in ``experiments/studies/*.yaml``, by name (file stem)."""
    folder = Path(__file__).resolve().parent.parent / "studies"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file (YAML or JSON), or a shipped study by name (``whatif-small``).

    A cluster file the study names is looked up beside the study file first.
    """
    shipped = shipped_studies()
    if not Path(path).is_file() and str(path) in shipped:  # a folder of that name (its --out) is no study
        path = shipped[str(path)]
    elif not Path(path).is_file():
        raise InputError("file", str(path), "a study file (YAML or JSON) or a shipped study: " + ", ".join(shipped))
    path = Path(path)
    data = read_document(path, "study", "study file")  # size- and alias-limited (costmodel.documents)
    return build_spec(data, source=str(path), folder=path.parent)


# --- expansion -------------------------------------------------------------------------------------


def _defaults(spec: StudySpec) -> dict[str, Any]:
    if spec.engine == "recovery":
        return {**RECOVERY_DEFAULTS, "nodes": spec.cluster["nodes"],
                "storage_bandwidth": spec.cluster.get("storage_bandwidth_Bps") or RecoveryConfig.storage_Bps}
    inter = spec.cluster["inter_link"]
    world = spec.cluster["nodes"] * spec.cluster["devices_per_node"]
    return {
        "ranks": DEFAULT_EMULATED_RANKS if spec.engine == "emulated" else world,
        "ratio": DEFAULT_RATIO,
        "bandwidth": float(inter["bandwidth_Bps"]),
        "latency": float(inter["latency_s"]),
        "batch": None,  # the workload's own
        "steps": DEFAULT_STEPS.get(spec.engine),
    }


def _setting(spec: StudySpec, workload: str, values: Mapping[str, Any], repeat: int) -> dict[str, Any]:
    """What a point's seed derives from: the same failures (recovery) or initial model and data (training) for
    every strategy, ratio and network compared at one setting."""
    if spec.engine == "recovery":
        return {"workload": workload, "nodes": values["nodes"], "repeat": repeat}
    return {"workload": workload, "ranks": values["ranks"], "batch": values["batch"], "steps": values["steps"],
            "repeat": repeat}


def _params(spec: StudySpec, strategy: str, workload: str, values: Mapping[str, Any]) -> dict[str, Any]:
    if spec.engine == "recovery":
        return {"strategy": strategy, "workload": workload, **{AXES[a].column: values[a] for a in RECOVERY_AXES}}
    params: dict[str, Any] = {
        "strategy": strategy, "workload": workload, "ranks": values["ranks"],
        "ratio": None if strategy in RATIO_FREE else values["ratio"],
        "bandwidth_Bps": values["bandwidth"], "latency_s": values["latency"], "batch": values["batch"],
    }
    if spec.engine != "model":
        params["steps"] = values["steps"]
    return params


def expand(spec: StudySpec) -> list[Point]:
    """The cartesian product of the axes (file order), strategies innermost; ratio-free ones once per setting."""
    defaults = _defaults(spec)
    names = [a for a in spec.axes if a != "workload"]
    grids = [spec.axes[a] for a in names]
    cluster_id = _hash(spec.cluster)
    points: list[Point] = []
    seen: set[str] = set()
    for workload in spec.workloads:
        for repeat in range(spec.repeats):
            for combo in itertools.product(*grids):
                values = {**defaults, **dict(zip(names, combo, strict=True))}
                seed = derive_seed(spec.seed, _setting(spec, workload, values, repeat))
                for strategy in spec.strategies:
                    params = {**_params(spec, strategy, workload, values), "repeat": repeat, "seed": seed}
                    key = {"engine": spec.engine, "cluster": cluster_id, **params}
                    if spec.engine == "emulated":
                        key["target_accuracy"] = spec.target_accuracy
                    pid = _hash(key)
                    if pid in seen:  # a ratio-free strategy at another ratio: the same run
                        continue
                    seen.add(pid)
                    points.append(Point(pid, len(points), params))
    return points


def point_payload(spec: StudySpec, point: Point) -> dict[str, Any]:
    """Everything a worker needs to run a point (plain data, so it pickles to any process or machine)."""
    return {"id": point.id, "engine": spec.engine, "cluster": spec.cluster, "params": point.params,
            "target_accuracy": spec.target_accuracy}
