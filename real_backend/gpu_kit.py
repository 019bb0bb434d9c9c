"""``make gpu-kit``: everything the lent GPU machine lacks to run ``gpu_check.sh``, as wheels in one folder.

Why: the lent machine (one H200, CPython 3.12, a CUDA torch) can fetch nothing, and a loan is 15 minutes. Its
image holds most of what flexcomm imports (numpy, scipy, pandas, matplotlib, networkx, torch...; the list as
read there is ``real_backend/device_image.txt``) but not simpy, pydantic, pymoo, dask, gymnasium,
stable-baselines3, pymetis and their own dependencies. The kit is:

* ``wheels/flexcomm-*.whl``: this checkout as a wheel (the engines import as ``flexcomm.*`` only installed);
* ``wheels/*.whl``: every package of flexcomm's dependency closure (read from this environment's metadata)
  that the image lacks, at the version installed here, for CPython 3.12 manylinux x86_64
  (``pip download --only-binary=:all: --python-version 3.12``: a missing wheel fails the build, which proves
  the device can install it);
* ``manifest.json`` (packages, versions, bytes) and ``INSTALL.txt`` (the one command for the device).

With ``--rehearse-python`` (:func:`build`'s ``rehearse_python``), the same versions are also fetched for this
machine's Python into ``rehearse/``, so ``gpu_check.sh --rehearse`` can install the kit with ``--no-index`` next
to a torch from this disk.
The kit must stay under :data:`LIMIT_BYTES` (what the device tool carries).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE_LIST = Path(__file__).resolve().parent / "device_image.txt"
LIMIT_BYTES = 64 * 2**20
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64")
#: Never carried: the device has its own CUDA build, and ours is a CPU wheel for another Python.
NEVER = {"torch", "flexcomm"}


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = IMAGE_LIST) -> set[str]:
    return {normal(line.strip()) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")}


def closure(root: str = "flexcomm") -> dict[str, str]:
    """flexcomm's runtime dependency closure as installed here: normalised name -> version (extras left out)."""
    seen: dict[str, str] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement guarded by a marker that does not hold here (e.g. an old Python's backport)
        key = normal(dist.metadata["Name"])
        if key in seen:
            continue
        seen[key] = dist.version
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            todo.append(re.split(r"[ ;<>=!~\[(]", requirement.strip())[0])
    return seen


class KitTooLargeError(RuntimeError):
    """The wheels add up to more than the device tool carries (:data:`LIMIT_BYTES`)."""


def image_needs() -> dict[str, str]:
    """The packages of flexcomm's closure the device image already has, at the versions installed here (what
    the rehearsal's venv installs before the kit, standing in for the image)."""
    image = image_packages()
    return {name: version for name, version in sorted(closure().items()) if name in image and name not in NEVER}


def missing(image: set[str] | None = None) -> dict[str, str]:
    """What the kit carries: the closure less the image's packages, torch and flexcomm itself."""
    image = image_packages() if image is None else image
    return {name: version for name, version in sorted(closure().items())
            if name not in image and name not in NEVER}


def _download(packages: dict[str, str], folder: Path, python: str) -> None:
    abi = "cp" + python.replace(".", "")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
               "-d", str(folder)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += [f"{name}=={version}" for name, version in packages.items()]
    subprocess.run(command, check=True)


def build(out: Path, rehearse_python: str | None = None, carried: dict[str, str] | None = None) -> dict[str, object]:
    """Write the kit to ``out`` (see the module doc) carrying ``carried`` (default :func:`missing`); returns the
    manifest. Raises :class:`KitTooLargeError` over :data:`LIMIT_BYTES`."""
    wheels = out / "wheels"
    if out.exists():
        shutil.rmtree(out)
    wheels.mkdir(parents=True)
    carried = missing() if carried is None else carried
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(ROOT)], check=True)
    _download(carried, wheels, DEVICE_PYTHON)
    files = sorted(wheels.glob("*.whl"))
    total = sum(f.stat().st_size for f in files)
    if total > LIMIT_BYTES:
        raise KitTooLargeError(f"gpu-kit: {total / 2**20:.1f} MiB of wheels, over the device's "
                               f"{LIMIT_BYTES / 2**20:.0f} MiB limit")
    manifest = {"python": DEVICE_PYTHON, "packages": carried, "bytes": total,
                "wheels": {f.name: f.stat().st_size for f in files}, "image_list": str(IMAGE_LIST.relative_to(ROOT))}
    if rehearse_python:
        rehearse = out / "rehearse"
        rehearse.mkdir()
        binary = {name: version for name, version in carried.items()
                  if not any(f.name.lower().startswith(name.replace("-", "_")) and f.name.endswith("none-any.whl")
                             for f in files)}
        _download(binary, rehearse, rehearse_python)
        manifest["rehearse"] = {"python": rehearse_python, "packages": binary}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (out / "INSTALL.txt").write_text(
        "On the GPU machine, from the checkout (the kit travels as an ignored path: carry gpu-kit):\n"
        "  python3 -m pip install --no-index --no-deps --target gpu-kit/site gpu-kit/wheels/*.whl && "
        "KIT=\"$PWD/gpu-kit/site\" real_backend/gpu_check.sh \"$OUT\"\n", encoding="utf-8")
    return manifest
