"""A learned compression controller: a gymnasium environment around emulated training, trained with
stable-baselines3 (gSDE vs Gaussian exploration) and compared with the multi-objective optimizer.

Modules: :mod:`controller.traces` (seeded training / held-out network traces), :mod:`controller.env`
(the environment), :mod:`controller.train` (PPO with and without ``use_sde``), :mod:`controller.evaluate`
(held-out comparison) and :mod:`controller.plots`.
"""
