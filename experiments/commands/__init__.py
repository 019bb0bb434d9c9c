"""Sub-commands of the ``flexcomm`` CLI; each module has ``register(subparsers)``."""

from flexcomm.experiments.commands import (
    bench_collectives,
    calibrate,
    clusters,
    constants,
    controller,
    cost,
    launch,
    pareto,
    place,
    plan,
    reproduce,
    simulate,
    study,
    testbed,
    train_ddp,
    train_emulated,
    validate,
    whatif,
)

COMMANDS = [cost, whatif, calibrate, clusters, constants, launch, bench_collectives, testbed, train_ddp, validate,
            train_emulated, simulate, reproduce, study, pareto, plan, place, controller]
