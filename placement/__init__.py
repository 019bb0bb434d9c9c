"""Device placement of operator graphs: a simulator of a placement's step time, baselines, and searches.

``simulator`` prices a placement (op -> device) on a ``devices.DeviceSet`` taken from a cluster;
``baselines`` are the classic placers (single device, critical-path list scheduling, METIS
partitioning, DP over a chain); ``ppo`` is a grouper-placer policy trained with PPO against the
simulator; ``es`` runs asynchronous (AES-RL style) and synchronous evolution strategies over
``coarsen`` units; ``compare`` runs them side by side and ``plots`` draws the results;
``reference`` is a plain re-implementation of the schedule (tests, benchmark baseline) and ``toy``
holds small synthetic graphs.
"""
