"""Collective communication libraries as they run on GPU clusters: NVIDIA NCCL and AMD RCCL.

One module per concern, each opening with what it models, from which source, and what it does not:

* :mod:`.versions`: the NCCL releases modelled (2.19 to 2.30) and what changed between them;
* :mod:`.transports`: the network between nodes (InfiniBand, RoCE, EFA, Slingshot, TCP) and the host launch;
* :mod:`.topology`: NCCL's topology search (channels and per-channel bandwidth per algorithm);
* :mod:`.tuner`: NCCL's tuner (``src/graph/tuning.cc``), which *chooses* an algorithm and protocol;
* :mod:`.runtime`: how NCCL then *runs* the call (channels and threads launched at this size, chunk
  pipeline, host launch) and how long it takes;
* :mod:`.rccl`: AMD's RCCL (its tuning models, xGMI topology, MSCCL paths);
* :mod:`.algorithms`: the ``--algorithm nccl[:ALGO][/PROTO]`` form;
* :mod:`.call_cost`: one call priced end to end (``--algorithm nccl``) and its explanation;
* :mod:`.logs` / :mod:`.validation`: nccl-tests logs in and out, and a log predicted row by row.
"""
