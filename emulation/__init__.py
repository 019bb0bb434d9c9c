"""Emulated data-parallel training: real gradients of N logical workers in one process, a simulated clock.

An engine beside :mod:`sim` (not an experiment): the learned controller, the what-if studies and the
reproductions all build on it. :mod:`.engine` runs one strategy (:class:`~emulation.engine.EmulatedRun`) or
several on one setting (:func:`~emulation.engine.run_emulation`); :mod:`.network` prices each collective on
a static cluster or a dynamic network; :mod:`.plots` draws the runs; :mod:`.options` lists the choices
without importing torch.
"""
