"""Parallel-plan planner: operator graphs of torch models, plan enumeration, pricing and re-ranking.

:mod:`planner.graphs` traces models into operator graphs (shared with :mod:`placement`),
:mod:`planner.rank_devices` describes (possibly heterogeneous) devices per rank, :mod:`planner.plans`
prices one (dp, tp, pp, micro-batches, ZeRO) plan with the cost model, :mod:`planner.search`
enumerates and ranks them and :mod:`planner.simulate` re-ranks the best few on the simulator.
"""
