"""Sub-commands of the ``flexcomm`` CLI; each module has ``register(subparsers)``."""

from experiments.commands import calibrate, clusters, cost, whatif

COMMANDS = [cost, whatif, calibrate, clusters]
