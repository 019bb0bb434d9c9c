"""The GPU kit: what the lent machine lacks, flexcomm importable from its wheel alone, the rehearsal's guard.

The whole rehearsal (``make gpu-rehearse``: a fresh venv, downloads, every step on gloo) takes minutes and the
network; here runs the part that fits a test: the kit's package list, the flexcomm wheel installed with
``--no-deps --target`` and imported with no checkout on the path, and ``--rehearse`` without a kit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flexcomm.real_backend.gpu_kit import ROOT, image_packages, missing


def test_the_kit_carries_what_the_image_lacks_and_nothing_it_has() -> None:
    carried = missing()
    for needed in ("simpy", "pydantic", "pydantic-core", "pymoo", "dask", "gymnasium", "stable-baselines3",
                   "pymetis"):
        assert needed in carried, needed
    image = image_packages()
    assert "numpy" in image and "torch" in image
    assert not set(carried) & image and "torch" not in carried and "flexcomm" not in carried


def test_flexcomm_imports_from_its_wheel_alone(tmp_path: Path) -> None:
    """What failed before the kit: ``PYTHONPATH=checkout`` cannot import ``flexcomm.costmodel`` (the package-dir
    mapping exists only installed). The wheel, installed with --no-deps --target, imports from anywhere."""
    wheels, target = tmp_path / "wheels", tmp_path / "kit"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True)
    (wheel,) = wheels.glob("flexcomm-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    probe = ("import flexcomm, flexcomm.experiments.cli, flexcomm.costmodel.cluster as c; "
             "print(flexcomm.__file__); print(c.load_cluster('dgx-h100').world_size)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(target)}).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == "16"  # the wheel's package and its shipped clusters


def test_rehearse_without_a_kit_says_make_gpu_kit(tmp_path: Path) -> None:
    result = subprocess.run([str(ROOT / "real_backend" / "gpu_check.sh"), "--rehearse", str(tmp_path / "out")],
                            capture_output=True, text=True, env={**os.environ, "GPU_KIT": str(tmp_path / "none")})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "make gpu-kit" in result.stderr
