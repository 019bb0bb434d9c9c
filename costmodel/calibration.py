"""Fit the cost model's alpha (s) and beta (s/byte) to measured collective times.

Each measured row is priced with the same :data:`costmodel.collectives.FORMULAS` coefficients the
simulator uses, so a calibrated profile plugs straight back into the model:

    seconds ~= alpha * a(bytes, ranks) + beta * (b + g)(bytes, ranks)

Decisions, and why:

* **gamma is folded into beta.** Every formula's reduction count ``g`` is proportional to the
  bytes, just like ``b``, so the two columns are collinear per algorithm and cannot be told apart
  from timings; the fitted ``beta`` is therefore an *effective* s/byte that includes reduction
  compute, and :meth:`CalibrationProfile.predict` prices ``b + g`` with it.
* **Log-ratio residuals** ``log(predicted / measured)``: message sizes span many decades, and
  absolute residuals would let the largest sizes decide both parameters and ignore latency; the
  log ratio (~ relative error for small errors) is also symmetric, so an outlier measured too fast
  weighs no more than one measured too slow.
* **Robust loss** (``cauchy`` by default, started from the ``soft_l1`` optimum; via
  :func:`scipy.optimize.least_squares`) so a few gross outliers (a noisy neighbour, a warm-up
  iteration) do not drag the fit; ``f_scale`` is the log-ratio (~ relative error) up to which a
  residual counts as an inlier (0.1 = 10 %).
* **Repetitions are medianed first** per (ranks, bytes): benchmark tools repeat small sizes far
  more often than large ones, and fitting every row would weight configurations by how often they
  were repeated; the median is also robust to slow repetitions by itself. The fit quality
  (R^2, residuals) is still reported on every row, since that is what was measured.
* Rows with ``ranks == 1`` cost nothing in every formula (there is no communication), so they
  carry no information about alpha or beta; they are left out of the fit and its statistics.
* ``(allreduce, hierarchical)`` composes two links and is calibrated through its parts
  (the intra- and inter-node single-link algorithms), so fitting it is rejected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.optimize import least_squares

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.bounded_stream import read_csv_bounded
from flexcomm.costmodel.cluster_parts import Link
from flexcomm.costmodel.collectives import FORMULAS, HIERARCHICAL, algorithms
from flexcomm.costmodel.documents import parse_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_DOCUMENT_BYTES, MAX_FILE_BYTES, read_text_bounded

if TYPE_CHECKING:
    from flexcomm.costmodel.cluster import Cluster

FORMAT = "flexcomm-calibration/1"
LOSSES = ("linear", "huber", "soft_l1", "cauchy")
DEFAULT_LINK_CLASS = "inter"
REQUIRED_COLUMNS = ("collective", "algorithm", "ranks", "bytes", "seconds")
#: Default synthetic sizes: 1 B to 1 GiB in factors of 4, so latency and bandwidth both dominate
#: somewhere in the sweep (as in an nccl-tests / OSU sweep).
DEFAULT_SIZES: tuple[int, ...] = tuple(4**k for k in range(16))

_GROUP = ["collective", "algorithm", "link_class"]


# --- measurements -----------------------------------------------------------------------------


def _where(is_csv: bool, label: object) -> str:
    """Where a bad value sits: CSV line numbers (header is line 1) or the DataFrame index label."""
    return f"CSV line {int(label) + 2}" if is_csv else f"row {label!r}"


def _first_bad(series: pd.Series, bad: pd.Series) -> tuple[object, object]:
    """(index label, raw value) of the first bad row; positional, so duplicate labels are fine."""
    pos = int(np.flatnonzero(bad.to_numpy())[0])
    return series.index[pos], series.iloc[pos]


def _numeric_column(raw: pd.DataFrame, name: str, is_csv: bool) -> pd.Series:
    stripped = raw[name].map(lambda v: v.strip() if isinstance(v, str) else v)
    values = pd.to_numeric(stripped, errors="coerce").astype(float)
    bad = ~np.isfinite(values)
    if bad.any():
        label, got = _first_bad(raw[name], bad)
        raise InputError(f"measurements.{name}", got, f"a finite number ({_where(is_csv, label)})")
    return values


def _string_column(raw: pd.DataFrame, name: str, is_csv: bool) -> pd.Series:
    col = raw[name]
    bad = col.isna() | ~col.map(lambda v: isinstance(v, str) and v.strip() != "")
    if bad.any():
        label, got = _first_bad(col, bad)
        raise InputError(f"measurements.{name}", got, f"a non-empty name ({_where(is_csv, label)})")
    return col.map(lambda v: v.strip().lower())


def load_measurements(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Read and validate a measurement table (CSV path or DataFrame), raising :class:`InputError`.

    Columns ``collective, algorithm, ranks, bytes, seconds`` and optionally ``link_class``
    (``"inter"`` when the column is absent or a cell is blank). Names are stripped and
    lower-cased; extra columns are kept. A DataFrame keeps its index so residuals line up with the
    caller's rows.
    """
    is_csv = not isinstance(source, pd.DataFrame)
    if is_csv:
        path = Path(source)
        if not path.is_file():
            raise InputError("measurements", str(path), "an existing CSV file")
        # bounded (no FIFO, no 10 GB file), UTF-8, and a parse error in one line
        raw = read_csv_bounded(path, "measurements", "CSV file", MAX_FILE_BYTES, encoding_errors="strict",
                               dtype=str, keep_default_na=False, skipinitialspace=True)
        raw.columns = [str(c).strip() for c in raw.columns]
    else:
        raw = source.copy()
    for name in REQUIRED_COLUMNS:
        if name not in raw.columns:
            raise InputError(f"measurements.{name}", "missing column", f"a column named {name!r}")
    if raw.empty:
        raise InputError("measurements", "no rows", "at least one measurement")
    if "link_class" not in raw.columns:
        raw["link_class"] = DEFAULT_LINK_CLASS
    # A blank link_class cell means the default too, so tables with and without the column mix.
    blank = raw["link_class"].isna() | raw["link_class"].map(lambda v: isinstance(v, str) and not v.strip())
    raw["link_class"] = raw["link_class"].where(~blank, DEFAULT_LINK_CLASS)

    out = raw.copy()
    for name in ("collective", "algorithm", "link_class"):
        out[name] = _string_column(raw, name, is_csv)
    table = algorithms()
    for label, collective, algorithm in zip(out.index, out["collective"], out["algorithm"], strict=True):
        if collective not in table:
            raise InputError(
                "measurements.collective",
                collective,
                f"one of {', '.join(sorted(table))} ({_where(is_csv, label)})",
            )
        if algorithm not in table[collective]:
            raise InputError(
                "measurements.algorithm",
                algorithm,
                f"for {collective} one of {', '.join(table[collective])} ({_where(is_csv, label)})",
            )

    ranks = _numeric_column(raw, "ranks", is_csv)
    bad = (ranks < 1) | (ranks != np.floor(ranks))
    if bad.any():
        label, got = _first_bad(raw["ranks"], bad)
        raise InputError("measurements.ranks", got, f"an integer >= 1 ({_where(is_csv, label)})")
    nbytes = _numeric_column(raw, "bytes", is_csv)
    if (nbytes < 0).any():
        label, got = _first_bad(raw["bytes"], nbytes < 0)
        raise InputError("measurements.bytes", got, f"bytes >= 0 ({_where(is_csv, label)})")
    seconds = _numeric_column(raw, "seconds", is_csv)
    if (seconds <= 0).any():
        label, got = _first_bad(raw["seconds"], seconds <= 0)
        raise InputError("measurements.seconds", got, f"seconds > 0 ({_where(is_csv, label)})")
    out["ranks"] = ranks.astype(np.int64)
    out["bytes"] = nbytes
    out["seconds"] = seconds
    first = [*REQUIRED_COLUMNS[:2], "link_class", *REQUIRED_COLUMNS[2:]]
    return out[first + [c for c in out.columns if c not in first]]


def _coefficients(collective: str, algorithm: str, nbytes: ArrayLike, ranks: ArrayLike) -> np.ndarray:
    """(latency count, effective byte count) columns; gamma's bytes join beta's (see module doc)."""
    if (collective, algorithm) == HIERARCHICAL:
        raise InputError(
            "algorithm",
            algorithm,
            "a single-link algorithm: calibrate the hierarchical allreduce through its intra- and "
            "inter-node parts",
        )
    if (collective, algorithm) not in FORMULAS:
        table = algorithms()
        if collective not in table:
            raise InputError("collective", collective, "one of " + ", ".join(sorted(table)))
        raise InputError("algorithm", algorithm, f"for {collective} one of " + ", ".join(table[collective]))
    coef = FORMULAS[(collective, algorithm)](nbytes, ranks)
    return np.stack([coef.alpha, coef.beta + coef.gamma], axis=-1)


# --- fitting ----------------------------------------------------------------------------------


@dataclass
class FitResult:
    """Calibrated latency and effective inverse bandwidth of one (collective, algorithm, link)."""

    collective: str
    algorithm: str
    link_class: str
    alpha_s: float
    beta_s_per_byte: float
    points: int
    r2: float
    median_abs_rel_error: float
    max_abs_rel_error: float

    @property
    def bandwidth_Bps(self) -> float:
        """Effective bandwidth 1/beta in bytes/s (inf when beta fitted to zero)."""
        return math.inf if self.beta_s_per_byte <= 0 else 1.0 / self.beta_s_per_byte

    def to_dict(self) -> dict[str, object]:
        """The JSON fit entry: exactly the dataclass fields, as plain Python values."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _robust_fit(
    coef: np.ndarray, seconds: np.ndarray, loss: str, f_scale: float, key: str
) -> tuple[float, float]:
    """Robust least squares on log-ratio residuals log(predicted / measured) with alpha, beta >= 0.

    The log ratio is symmetric: a point measured 3x too fast weighs as much as one 3x too slow
    (a plain relative error (pred - meas) / meas lets a too-fast outlier dominate, since its
    residual is unbounded while a too-slow one's never exceeds 1).

    The problem is linear, so it is column-scaled (alpha ~1e-5 and beta ~1e-10 would otherwise
    make the Jacobian hopelessly ill-conditioned) and started from the ordinary least-squares
    solution, clipped to tiny positive values so the start is strictly inside the bounds.
    """
    z = coef / seconds[:, None]  # relative residual = z @ [alpha, beta] - 1
    scale = np.linalg.norm(z, axis=0)
    if np.any(scale == 0) or np.linalg.matrix_rank(z / np.where(scale == 0, 1.0, scale)) < 2:
        raise InputError(
            "measurements",
            key,
            "points whose latency and bandwidth terms are not proportional (e.g. at least two message "
            "sizes, one of them > 0, with ranks >= 2) so alpha and beta can both be fitted",
        )
    zs = z / scale
    ones = np.ones(len(seconds))
    start, *_ = np.linalg.lstsq(zs, ones, rcond=None)
    tiny = 1e-9 * max(1.0, float(np.max(np.abs(start))))
    start = np.maximum(start, tiny)
    floor = 1e-12

    def log_ratio(u: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(zs @ u, floor))

    def log_ratio_jacobian(u: np.ndarray) -> np.ndarray:
        return zs / np.maximum(zs @ u, floor)[:, None]

    def solve(initial: np.ndarray, loss_name: str) -> np.ndarray:
        return least_squares(
            log_ratio,
            initial,
            jac=log_ratio_jacobian,
            bounds=(0.0, np.inf),
            loss=loss_name,
            f_scale=f_scale,
            method="trf",
            x_scale=1.0,
            ftol=1e-12,
            xtol=1e-12,
            gtol=1e-12,
            max_nfev=1000,
        ).x

    # Cauchy's loss is not convex: start it from the convex soft_l1 optimum, not from the
    # outlier-contaminated ordinary least-squares point, or it can settle in a wrong basin.
    x = solve(np.maximum(solve(start, "soft_l1"), tiny), loss) if loss == "cauchy" else solve(start, loss)
    alpha, beta = np.maximum(x, 0.0) / scale
    return float(alpha), float(beta)


def _fit_group(group: pd.DataFrame, key: tuple[str, str, str], loss: str, f_scale: float) -> FitResult:
    collective, algorithm, link_class = key
    used = group[group["ranks"] >= 2]
    label = "/".join(key)
    if used.empty:
        raise InputError("measurements.ranks", label, "rows with ranks >= 2 (one rank never communicates)")
    # Median repetitions of the same configuration (see module doc).
    design = used.groupby(["ranks", "bytes"], as_index=False)["seconds"].median()
    coef = _coefficients(collective, algorithm, design["bytes"].to_numpy(), design["ranks"].to_numpy())
    alpha, beta = _robust_fit(coef, design["seconds"].to_numpy(float), loss, f_scale, label)

    rows = _coefficients(collective, algorithm, used["bytes"].to_numpy(), used["ranks"].to_numpy())
    measured = used["seconds"].to_numpy(float)
    predicted = rows @ np.array([alpha, beta])
    rel = np.abs(predicted - measured) / measured
    total = float(np.sum((measured - measured.mean()) ** 2))
    r2 = 1.0 - float(np.sum((measured - predicted) ** 2)) / total if total > 0 else math.nan
    return FitResult(
        collective=collective,
        algorithm=algorithm,
        link_class=link_class,
        alpha_s=alpha,
        beta_s_per_byte=beta,
        points=len(used),
        r2=r2,
        median_abs_rel_error=float(np.median(rel)),
        max_abs_rel_error=float(np.max(rel)),
    )


def fit(
    measurements: str | Path | pd.DataFrame, loss: str = "cauchy", f_scale: float = 0.1
) -> CalibrationProfile:
    """Fit alpha and beta per (collective, algorithm, link_class) found in ``measurements``.

    ``loss`` is one of ``linear, huber, soft_l1, cauchy``; ``f_scale`` the relative residual
    beyond which the robust losses start down-weighting a point.
    """
    if loss not in LOSSES:
        raise InputError("loss", loss, "one of " + ", ".join(LOSSES))
    if not (isinstance(f_scale, (int, float)) and math.isfinite(f_scale) and f_scale > 0):
        raise InputError("f_scale", f_scale, "a positive relative error such as 0.1")
    table = load_measurements(measurements)
    hierarchical = (table["collective"] == HIERARCHICAL[0]) & (table["algorithm"] == HIERARCHICAL[1])
    if hierarchical.any():
        raise InputError(
            "measurements.algorithm",
            HIERARCHICAL[1],
            "a single-link algorithm: the hierarchical allreduce is calibrated through its parts "
            "(fit the intra- and inter-node algorithms with their own link_class)",
        )
    fits = [
        _fit_group(group, key, loss, f_scale)  # type: ignore[arg-type]
        for key, group in table.groupby(_GROUP, sort=True)
    ]
    source = "" if isinstance(measurements, pd.DataFrame) else str(measurements)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return CalibrationProfile(fits=fits, source=source, created=created)


# --- profile ----------------------------------------------------------------------------------


_FIT_STRINGS = ("collective", "algorithm", "link_class")
_FIT_NUMBERS = ("alpha_s", "beta_s_per_byte", "r2", "median_abs_rel_error", "max_abs_rel_error")
_FIT_QUALITY = ("r2", "median_abs_rel_error", "max_abs_rel_error")  #: how well the fit went: null = not recorded


def _json_number(value: float) -> float | None:
    """JSON has no NaN/inf: store them as null (only a degenerate fit has a NaN R^2)."""
    return float(value) if math.isfinite(value) else None


def _parse_fit(entry: object, where: str) -> FitResult:
    if not isinstance(entry, dict):
        raise InputError(where, entry, "an object with the fit's fields")
    values: dict[str, object] = {}
    for name in _FIT_STRINGS:
        got = entry.get(name)
        if not isinstance(got, str) or not got:
            raise InputError(f"{where}.{name}", got, "a non-empty string")
        values[name] = got
    key = (values["collective"], values["algorithm"])
    if key not in FORMULAS:
        raise InputError(f"{where}.algorithm", "/".join(key), "a single-link (collective, algorithm) pair")
    for name in _FIT_NUMBERS:
        got = entry.get(name)
        if name in _FIT_QUALITY and got is None:  # not recorded (a degenerate fit's R^2, a reconstructed fit)
            values[name] = math.nan
            continue
        ok = isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got)
        if not ok or (name != "r2" and got < 0):
            expected = "a finite number" if name == "r2" else "a finite number >= 0"
            raise InputError(f"{where}.{name}", got, expected)
        values[name] = float(got)
    points = entry.get("points")
    if not isinstance(points, int) or isinstance(points, bool) or points < 0:
        raise InputError(f"{where}.points", points, "an integer >= 0")
    values["points"] = points
    return FitResult(**values)  # type: ignore[arg-type]


@dataclass
class CalibrationProfile:
    """A set of fits, looked up by (collective, algorithm, link_class); saved as versioned JSON."""

    fits: list[FitResult]
    source: str = ""
    created: str = ""
    _index: dict[tuple[str, str, str], FitResult] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index = {}
        for item in self.fits:
            key = (item.collective, item.algorithm, item.link_class)
            if key in self._index:
                raise InputError("profile.fits", "/".join(key), "one fit per (collective, algorithm, link)")
            self._index[key] = item

    def get(
        self, collective: str, algorithm: str, link_class: str = DEFAULT_LINK_CLASS, strict: bool = False
    ) -> FitResult | None:
        """The fit for this link class; else (unless ``strict``) the same algorithm on another link.

        The fallback prefers ``"inter"`` then the first fit in profile order: a measured algorithm
        on the wrong link is a better guess than nothing, but pass ``strict=True`` to refuse it.
        """
        exact = self._index.get((collective, algorithm, link_class))
        if exact is not None or strict:
            return exact
        inter = self._index.get((collective, algorithm, DEFAULT_LINK_CLASS))
        if inter is not None:
            return inter
        return next((f for f in self.fits if (f.collective, f.algorithm) == (collective, algorithm)), None)

    def predict(
        self,
        collective: str,
        algorithm: str,
        nbytes: ArrayLike,
        ranks: ArrayLike,
        link_class: str = DEFAULT_LINK_CLASS,
    ) -> np.ndarray:
        """Predicted seconds (broadcast over ``nbytes`` and ``ranks``) with the fitted parameters."""
        coef = _coefficients(collective, algorithm, nbytes, ranks)
        found = self.get(collective, algorithm, link_class)
        if found is None:
            have = ", ".join("/".join(k) for k in self._index) or "none"
            wanted = f"{collective}/{algorithm}/{link_class}"
            raise InputError("profile", wanted, f"a fitted algorithm ({have})")
        return coef @ np.array([found.alpha_s, found.beta_s_per_byte])

    def residuals(self, measurements: str | Path | pd.DataFrame) -> pd.DataFrame:
        """Every measured row with ``predicted_seconds`` and ``rel_error`` = (pred - meas) / meas.

        Rows this profile has no fit for (hierarchical included) get NaN, so a partial profile can
        still be checked against a full table.
        """
        table = load_measurements(measurements)
        predicted = np.full(len(table), np.nan)
        nbytes, ranks = table["bytes"].to_numpy(), table["ranks"].to_numpy()
        for (collective, algorithm, link_class), rows in table.groupby(_GROUP, sort=False).indices.items():
            if (collective, algorithm) not in FORMULAS or self.get(collective, algorithm, link_class) is None:
                continue
            predicted[rows] = self.predict(collective, algorithm, nbytes[rows], ranks[rows], link_class)
        seconds = table["seconds"].to_numpy()
        table["predicted_seconds"] = predicted
        table["rel_error"] = (predicted - seconds) / seconds
        return table

    def summary(self) -> pd.DataFrame:
        """One row per fit with bandwidth (bytes/s) added: the table to eyeball after calibrating."""
        columns = [f.name for f in fields(FitResult)]
        rows = [{**item.to_dict(), "bandwidth_Bps": item.bandwidth_Bps} for item in self.fits]
        frame = pd.DataFrame(rows, columns=[*columns[:5], "bandwidth_Bps", *columns[5:]])
        return frame

    def warnings(self) -> list[str]:
        """One line per fit that explains its points worse than their mean does (R^2 < 0): its alpha and beta
        describe no straight line through them, so predictions from it should not be trusted."""
        lines = []
        for item in self.fits:
            if math.isfinite(item.r2) and item.r2 < 0:
                lines.append(f"warning: {item.collective}/{item.algorithm} ({item.link_class}, {item.points} points): "
                             f"R^2 = {item.r2:.2f} < 0, the alpha-beta line fits worse than a constant; its "
                             f"predictions are unreliable (median error {item.median_abs_rel_error:.0%}). Measure a "
                             "wider range of sizes or more repetitions")
        return lines

    def to_dict(self) -> dict[str, object]:
        """The JSON document (format ``flexcomm-calibration/1``)."""
        entries = []
        for item in self.fits:
            entry = item.to_dict()
            for name in _FIT_NUMBERS:
                entry[name] = _json_number(float(entry[name]))  # type: ignore[arg-type]
            entries.append(entry)
        return {"format": FORMAT, "source": self.source, "created": self.created, "fits": entries}

    def save(self, path: str | Path) -> None:
        """Write JSON atomically (temp file in the same directory, then ``os.replace``).

        Readers never see a half-written profile, even if the process dies mid-write.
        """
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CalibrationProfile:
        """Read a saved profile, raising :class:`InputError` naming the bad ``profile.<key>``."""
        source = Path(path)
        if not source.exists():
            raise InputError("profile", str(source), "an existing calibration JSON file")
        text = read_text_bounded(source, "profile", "calibration JSON file", MAX_DOCUMENT_BYTES)
        document = parse_document(text, "json", str(source), "profile")  # a JSON error or nesting: one line
        return cls.from_dict(document)

    @classmethod
    def from_dict(cls, document: object) -> CalibrationProfile:
        """Validate and build a profile from its JSON document."""
        if not isinstance(document, dict):
            raise InputError("profile", type(document).__name__, "a JSON object")
        if document.get("format") != FORMAT:
            raise InputError("profile.format", document.get("format"), repr(FORMAT))
        for name in ("source", "created"):
            if not isinstance(document.get(name, ""), str):
                raise InputError(f"profile.{name}", document.get(name), "a string")
        entries = document.get("fits")
        if not isinstance(entries, list):
            raise InputError("profile.fits", entries, "a list of fits")
        fits = [_parse_fit(entry, f"profile.fits[{i}]") for i, entry in enumerate(entries)]
        return cls(fits=fits, source=document.get("source", ""), created=document.get("created", ""))


# --- synthetic data ---------------------------------------------------------------------------


def synthetic_measurements(
    collective: str,
    algorithm: str,
    alpha: float,
    beta: float,
    ranks: Sequence[int] = (2, 4, 8),
    sizes: Sequence[float] = DEFAULT_SIZES,
    noise: float = 0.05,
    outlier_fraction: float = 0.0,
    seed: int = 0,
    link_class: str = DEFAULT_LINK_CLASS,
    repeats: int = 1,
    outlier_range: tuple[float, float] = (3.0, 10.0),
) -> pd.DataFrame:
    """Noisy measurements from the model itself, to test and demonstrate calibration.

    Every (ranks, size, repetition) gets multiplicative lognormal noise of sigma ``noise`` (timing
    noise scales with the time); a random ``outlier_fraction`` of rows is then multiplied by a factor
    drawn uniformly from ``outlier_range`` (x3..x10: slowed, the way contention or a warm-up
    iteration spoils a measurement; factors < 1 model too-fast rows, e.g. a skipped operation).
    ``repeats`` measures every point that many times. Deterministic for a ``seed``.
    """
    if not (math.isfinite(alpha) and alpha >= 0):
        raise InputError("alpha", alpha, "seconds >= 0")
    if not (math.isfinite(beta) and beta >= 0):
        raise InputError("beta", beta, "seconds per byte >= 0")
    if not (math.isfinite(noise) and noise >= 0):
        raise InputError("noise", noise, "a lognormal sigma >= 0")
    if not (0.0 <= outlier_fraction < 1.0):
        raise InputError("outlier_fraction", outlier_fraction, "a fraction in [0, 1)")
    low, high = (float(x) for x in outlier_range)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
        raise InputError("outlier_range", outlier_range, "(low, high) factors with 0 < low <= high")
    if repeats < 1:
        raise InputError("repeats", repeats, "an integer >= 1")
    if any(p < 2 for p in ranks):
        raise InputError("ranks", list(ranks), "integers >= 2 (one rank does not communicate)")
    grid_p, grid_n, _ = np.meshgrid(
        np.asarray(ranks, dtype=float), np.asarray(sizes, dtype=float), np.arange(repeats), indexing="ij"
    )
    p, n = grid_p.ravel(), grid_n.ravel()
    coef = _coefficients(collective, algorithm, n, p)
    exact = coef @ np.array([alpha, beta], dtype=float)
    if np.any(exact <= 0):
        raise InputError("alpha", alpha, "a value making every synthetic time > 0 (alpha > 0 for 0 bytes)")
    rng = np.random.default_rng(seed)
    seconds = exact * rng.lognormal(mean=0.0, sigma=noise, size=exact.shape)
    count = int(round(outlier_fraction * len(seconds)))
    if count:
        picked = rng.choice(len(seconds), size=count, replace=False)
        seconds[picked] *= rng.uniform(low, high, size=count)
    return pd.DataFrame(
        {
            "collective": collective,
            "algorithm": algorithm,
            "link_class": link_class,
            "ranks": p.astype(np.int64),
            "bytes": n,
            "seconds": seconds,
        }
    )


def calibrated_cluster(
    cluster: Cluster, profile: CalibrationProfile, collective: str = "allreduce", algorithm: str = "ring"
) -> Cluster:
    """A copy of ``cluster`` whose intra/inter links carry the profile's fitted latency and bandwidth.

    How any command that takes a cluster takes a calibration profile: the simulator and the
    emulated clock price links, so the measured alpha (which includes per-message software
    overhead) and 1/beta replace the nominal ones. Per link class the ``collective/algorithm`` fit
    is used (allreduce/ring by default, the best-measured collective in practice), else the first
    fit of that class; per-node overrides keep applying on top.
    """
    updates: dict[str, Link] = {}
    for link_class, field_name in (("inter", "inter_link"), ("intra", "intra_link")):
        fit = profile.get(collective, algorithm, link_class, strict=True) or next(
            (f for f in profile.fits if f.link_class == link_class), None)
        if fit is None:
            continue
        nominal: Link = getattr(cluster, field_name)
        bandwidth = fit.bandwidth_Bps if fit.beta_s_per_byte > 0 else nominal.bandwidth_Bps
        updates[field_name] = Link(latency_s=fit.alpha_s, bandwidth_Bps=bandwidth, duplex=nominal.duplex)
    if not updates:
        raise InputError("profile", profile.source or "(profile)", "fits for link class inter or intra")
    return cluster.model_copy(update=updates)
