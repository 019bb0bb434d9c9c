"""A checkpointed train-ddp run killed at random moments resumes bitwise to the run never killed (issue 44)."""

from __future__ import annotations

from pathlib import Path

from flexcomm.real_backend.kill_resume import kill_and_resume


def test_runs_killed_at_random_moments_resume_bitwise(tmp_path: Path) -> None:
    """Three kills (the full 20: ``python -m flexcomm.experiments.commands.kill_resume``, docs/real-backend.md). A kill
    between the ranks' residual files and the model checkpoint's rename once resumed with ``residuals 0/2``;
    a resume whose first iteration met DDP's declaration-order bucket kept another of five tied Top-k values."""
    results = kill_and_resume(tmp_path, kills=3, seed=1)
    assert [r.bitwise for r in results] == [True, True, True], results
    assert all(r.steps_compared == 60 for r in results)
