"""The ``--algorithm nccl[:ALGO][/PROTO]`` form and the collectives each library path prices.

Kept apart from :mod:`.call_cost` so that both NCCL's and RCCL's paths (:mod:`.rccl`) read one definition.
"""

from __future__ import annotations

from flexcomm.costmodel.collective_libraries.tuner import ALGORITHMS, NCCL_NAMES, PROTOCOLS
from flexcomm.costmodel.collective_libraries.versions import NcclVersion
from flexcomm.costmodel.errors import InputError

TUNED = ("allreduce", "allgather", "reduce-scatter", "broadcast", "reduce")
P2P = ("alltoall", "sendrecv")
_FORM = "nccl, or nccl:ALGO, nccl:ALGO/PROTO, nccl:/PROTO (ALGO: ring, tree, nvls, nvls_tree, collnet_direct, " \
        "collnet_chain, pat; PROTO: ll, ll128, simple)"


def is_nccl_algorithm(name: str) -> bool:
    return name == "nccl" or name.startswith("nccl:")


def parse_nccl_algorithm(name: str, version: NcclVersion | None = None) -> tuple[str | None, str | None]:
    """``nccl:tree/ll128`` -> NCCL_ALGO and NCCL_PROTO values (None: NCCL chooses); an algorithm the
    release lacks (``nccl:pat`` before 2.23) is refused."""
    if name == "nccl":
        return None, None
    if not name.startswith("nccl:"):
        raise InputError("algorithm", name, _FORM)
    algo, _, proto = name[len("nccl:"):].partition("/")
    algo, proto = algo.strip().lower(), proto.strip().lower()
    if algo and algo not in ALGORITHMS:
        raise InputError("algorithm", name, _FORM)
    if proto and proto not in PROTOCOLS:
        raise InputError("algorithm", name, _FORM)
    if not algo and not proto:
        raise InputError("algorithm", name, _FORM)
    if algo == "pat" and version is not None and version < (2, 23):
        raise InputError("algorithm", name, f"an algorithm NCCL {version} has (PAT arrived in 2.23): ring, tree, "
                         "nvls, nvls_tree, collnet_direct, collnet_chain")
    return (NCCL_NAMES[algo] if algo else None), (NCCL_NAMES[proto] if proto else None)


