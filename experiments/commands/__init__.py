"""Sub-commands of the ``flexcomm`` CLI; each module has ``register(subparsers)``."""

from experiments.commands import bench_collectives, calibrate, clusters, cost, launch, testbed, whatif

COMMANDS = [cost, whatif, calibrate, clusters, launch, bench_collectives, testbed]
