"""The NCCL releases modelled, 2.19 to 2.30, and every difference between them that changes a price.

Why versions: NCCL's tuner constants, its algorithms and its runtime changed between the 2.19/2.20
generation the first model re-derived and the releases published runs use (2.23 to 2.30): Tree/Simple
latency fell from 28 to 4 us a step (2.23), ring LL bandwidth doubled (2.21), PAT arrived for one GPU per
node (2.23), Blackwell got its own rows (2.25), NVLS across a multi-node NVLink domain became possible
(2.21) and was re-priced (2.28), the channel limit doubled (2.25). A published run whose header states
its version is priced with that version; a cluster file names one in ``gpu_fabric.nccl_version``.

Every value below is read from ``NVIDIA/nccl`` at the release tag named beside it (``src/graph/tuning.cc``
unless said otherwise; line numbers are that tag's). A release is modelled as the newest behaviour at or
before it: 2.24.3 behaves as the 2.24 changes say. Units follow the source: microseconds, GB/s.

Not modelled: tuner plugins (a net plugin may ship one since 2.21: e.g. aws-ofi-nccl's region tuner, whose
choices are its own), symmetric-memory kernels (2.27+, registered windows only), copy-engine collectives
(2.28, registered windows only), NCCL_ALGO's per-collective syntax (2.24+).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flexcomm.costmodel.errors import InputError

#: Oldest and newest release modelled; outside them the tables below are not known to hold.
OLDEST = (2, 19, 0)
NEWEST = (2, 30, 7)
_FORM = "an NCCL version from 2.19 to 2.30 (e.g. 2.20.3, 2.28.9, or NCCL_VERSION_CODE 22809)"


@dataclass(frozen=True, eq=False)
class NcclVersion:
    """One NCCL release (major.minor.patch); compares as a tuple."""

    major: int
    minor: int
    patch: int = 0

    @property
    def key(self) -> tuple[int, int, int]:
        return self.major, self.minor, self.patch

    def __lt__(self, other: object) -> bool:
        if isinstance(other, NcclVersion):
            return self.key < other.key
        if isinstance(other, tuple):
            return self.key < other
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NcclVersion):
            return self.key == other.key
        if isinstance(other, tuple):
            return self.key == tuple(other) + (0,) * (3 - len(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.key)

    def __le__(self, other: object) -> bool:
        return self < other or self == other

    def __gt__(self, other: object) -> bool:
        return not self <= other

    def __ge__(self, other: object) -> bool:  # tuples on the right: ``version >= (2, 23)``
        if isinstance(other, (NcclVersion, tuple)):
            return not self < other
        return NotImplemented

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


DEFAULT = NcclVersion(*NEWEST)
#: The newest RCCL whose tuning tables were read (ROCm/rccl develop 0cbce2a7, RCCL 2.21.5; later releases keep
#: tuning model 5's tables): an RCCL cluster's default
RCCL_DEFAULT = NcclVersion(2, 21, 5)


def parse_version(text: object, field: str = "nccl_version") -> NcclVersion:
    """``2.28.9``, ``v2.27.7-1``, ``2.28.9+cuda12.9``, ``2.20`` or NCCL_VERSION_CODE ``22602`` (one line
    error naming ``field`` for anything else, or a release outside 2.19 to 2.30)."""
    if isinstance(text, bool) or text is None:
        raise InputError(field, text, _FORM)
    raw = str(text).strip()
    # a package release (-1) and a build tag (+cuda12.9) may follow; more dotted parts (2.20.3.4.5) may not
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?(?:\+[\w.]+)?", raw)
    if match:
        version = NcclVersion(int(match[1]), int(match[2]), int(match[3] or 0))
    elif re.fullmatch(r"\d{5}", raw):  # NCCL_VERSION_CODE: major*10000 + minor*100 + patch
        code = int(raw)
        version = NcclVersion(code // 10000, code // 100 % 100, code % 100)
    else:
        raise InputError(field, raw, _FORM)
    if not (OLDEST <= version.key <= (2, 30, 99)):
        raise InputError(field, raw, _FORM)
    return version


def version_in_text(text: str) -> NcclVersion | None:
    """The NCCL version a log or a header line states (``NCCL version 2.18.3+cuda12.2``, ``nccl-library=22602``,
    ``pins NCCL v2.27.7-1``), or None where it states none; a stated version outside the modelled range
    is returned as found and refused by the caller that prices it."""
    if re.search(r"\bnot\s+stated\b", text, re.IGNORECASE):
        return None
    code = re.search(r"nccl-library=(\d{5})\b", text)
    if code:
        value = int(code[1])
        return NcclVersion(value // 10000, value // 100 % 100, value % 100)
    match = re.search(r"(?:NCCL|nccl|RCCL|rccl)[ _-]*(?:version)?[ :=v]*(\d+)\.(\d+)\.(\d+)", text)
    if match:
        return NcclVersion(int(match[1]), int(match[2]), int(match[3]))
    return None


# --- the tuner's tables (index order: LL, LL128, Simple) -------------------------------------------


def base_lat_us(version: NcclVersion) -> dict[str, tuple[float, float, float]]:
    """``baseLat``: Tree/Simple 0 -> 8.4 at 2.23 (v2.20.3-1 L56-59, v2.23.4-1 L56-59); PAT 8 (2.28 table,
    2.23-2.27 add the same 8 in the formula)."""
    tree_simple = 8.4 if version >= (2, 23) else 0.0
    return {"tree": (6.8, 14.0, tree_simple), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0.0, 0.0, 0.0),
            "collnet_chain": (0.0, 0.0, 0.0), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
            "pat": (8.0, 8.0, 8.0)}


def hw_lat_us(version: NcclVersion) -> dict[str, dict[str, tuple[float, float, float]]]:
    """``hwLat`` per hardware (NVLink, PCI, network): Tree/Simple 28 -> 4 (NVLink, PCI) and 28 -> 14
    (network) at 2.23; NVLS 23 -> 25 at 2.21; network NVLS-tree 14 -> 20.9 at 2.28.9 (v2.20.3-1 L65-78,
    v2.21.5-1 L69, v2.23.4-1 L65-78, v2.28.9-1 L149-168)."""
    new_tree = version >= (2, 23)
    nvls = 25.0 if version >= (2, 21) else 23.0
    net_nvls_tree = 20.9 if version >= (2, 28, 9) else 14.0
    pat = 4.0 if version >= (2, 28) else 0.0
    return {
        "nvlink": {"tree": (0.6, 1.25, 4.0 if new_tree else 28.0), "ring": (0.6, 1.9, 3.4),
                   "collnet_direct": (0.0, 0.0, 3.7), "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, nvls),
                   "nvls_tree": (0.0, 0.0, nvls), "pat": (0.0, 0.0, pat)},
        "pci": {"tree": (1.0, 1.9, 4.0 if new_tree else 28.0), "ring": (1.0, 2.5, 5.7),
                "collnet_direct": (0.0, 0.0, 3.7), "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 0.0),
                "nvls_tree": (0.0, 0.0, 0.0), "pat": (0.0, 0.0, pat)},
        "net": {"tree": (5.0, 8.5, 14.0 if new_tree else 28.0), "ring": (2.7, 4.0, 14.0),
                "collnet_direct": (0.0, 0.0, 31.0), "collnet_chain": (0.0, 0.0, 30.0), "nvls": (0.0, 0.0, 18.0),
                "nvls_tree": (0.0, 0.0, net_nvls_tree), "pat": (0.0, 0.0, 14.0 if version >= (2, 28) else 0.0)},
    }


def arch_index(version: NcclVersion, compute_capability: int) -> int:
    """Row of the per-architecture tables: Volta 0, Ampere 1, Hopper 2, Blackwell 3 (Blackwell's row from
    2.25; before it Blackwell reads Hopper's) (v2.20.3-1 L140, v2.26.2-1 L216)."""
    if compute_capability >= 100 and version >= (2, 25):
        return 3
    return 2 if compute_capability >= 90 else 1 if compute_capability >= 80 else 0


def ll_max_bw(version: NcclVersion) -> tuple[tuple[float, float, float], ...]:
    """``llMaxBws`` rows Volta, Ampere, Hopper, Blackwell; columns 1, 2, more nodes. Hopper 87.7 -> 141
    (2.21.5 L89); Blackwell 2 x Hopper (2.25.1)."""
    hopper = (141.0, 45.0, 35.0) if version >= (2, 21) else (87.7, 22.5, 19.0)
    return ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), hopper, (282.0, 90.0, 70.0))


def per_channel_caps(version: NcclVersion) -> dict[str, tuple[tuple[float, float, float], ...]]:
    """Per-channel bandwidth caps (GB/s) per architecture row and node column: ring LL128, tree LL128,
    tree, NVLS-tree (the last from 2.28). Blackwell's rows changed at 2.25.1 (2 x Hopper), 2.28.3 (tree,
    tree LL128, NVLS-tree), 2.28.7 (ring LL128 N2 34.6), 2.28.9 (NVLS-tree N4 43.8), 2.29.2 (ring LL128
    34.5/34.6/34.5), 2.29.7 (ring LL128 40) and 2.30.3 (NVLS-tree N4 80) (tuning.cc at each tag)."""
    bw_ring_ll128, bw_tree_ll128, bw_tree = (73.4, 73.4, 73.4), (73.4, 73.4, 58.0), (77.4, 82.8, 72.0)
    bw_nvls_tree = (0.0, 0.0, 0.0)
    if version >= (2, 28):
        bw_tree_ll128, bw_tree = (55.6, 31.67, 20.0), (70.0, 42.8, 24.0)
        bw_nvls_tree = (0.0, 96.0, 43.8 if version >= (2, 28, 9) else 43.1)
    if version >= (2, 28, 7):
        bw_ring_ll128 = (73.4, 34.6, 73.4)
    if version >= (2, 29, 2):
        bw_ring_ll128 = (34.5, 34.6, 34.5)
    if version >= (2, 29, 7):
        bw_ring_ll128 = (40.0, 40.0, 40.0)
    if version >= (2, 30, 3):
        bw_nvls_tree = (0.0, 96.0, 80.0)
    return {
        "ring_ll128": ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), bw_ring_ll128),
        "tree_ll128": ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), bw_tree_ll128),
        "tree": ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), bw_tree),
        "nvls_tree": ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), bw_nvls_tree),
    }


def nvls_arity(version: NcclVersion) -> int:
    """``NCCL_MAX_NVLS_ARITY``: 8 until 2.20, 32 from 2.21 (device.h); the NVLS search caps its channels at it
    from 2.25.1 (search.cc @ v2.25.1-1 L992), at the GPU count before (a domain had at most 8 then)."""
    return 32 if version >= (2, 21) else 8


#: ``nvlsEfficiency`` per architecture row (2.28+; v2.28.9-1 L133-139).
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)


def has_pat(version: NcclVersion) -> bool:
    """PAT (allgather / reduce-scatter, Simple, one GPU per node) exists from 2.23 (v2.23.4-1 L108-115)."""
    return version >= (2, 23)


def pat_bw_factor(version: NcclVersion) -> float:
    """PAT's bandwidth factor: 0.85 in 2.23, 0.75 from 2.24.3 (v2.23.4-1 L276-281, v2.24.3-1)."""
    return 0.75 if version >= (2, 24) else 0.85


def max_channels(version: NcclVersion) -> int:
    """``MAXCHANNELS``: 32, 64 from 2.25 (src/include/device.h @ v2.20.3-1 L54, @ v2.27.7-1 L87)."""
    return 64 if version >= (2, 25) else 32


def nvls_channels(version: NcclVersion, compute_capability: int, one_domain: bool) -> int:
    """Channels an NVLS call runs (``nvlsChannels``): 16 on Hopper; Blackwell 32 (2.26), 24 inside one
    NVLink domain and 32 across (2.27+) (src/transport/nvls.cc @ v2.20.3-1 L231, @ v2.26.2-1 L144-178,
    @ v2.27.7-1 L147-198)."""
    if compute_capability >= 100 and version >= (2, 26):
        return 24 if one_domain and version >= (2, 27) else 32
    return 16


def nvls_chunk_bytes(version: NcclVersion) -> int:
    """The largest NVLS chunk: 128 KiB in both generations (enqueue.cc @ v2.20.3-1 L1703-1711,
    ``NCCL_NVLS_CHUNKSIZE`` @ v2.27.7-1 nvls.cc L152)."""
    return 131072
