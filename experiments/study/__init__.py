"""What-if studies: a YAML file names a cluster, a workload, strategies and sweep axes; every point runs once.

:mod:`.spec` validates the file and expands the sweep into points with stable ids and seeds,
:mod:`.engines` runs one point (cost model, simulator or emulated training), :mod:`.runner` runs the
points in a process pool or on a Dask cluster with an append-only journal (resumable), and
:mod:`.report` turns the journal into the tidy table, the plots and ``summary.md``.
"""

from flexcomm.experiments.study.spec import Point, StudySpec, load_spec

__all__ = ["Point", "StudySpec", "load_spec"]
