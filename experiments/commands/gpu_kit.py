"""``python -m flexcomm.experiments.commands.gpu_kit`` (``make gpu-kit``): build the GPU kit, or print what the
device image already holds (``--print-image-needs``, for ``gpu_check.sh --rehearse``).

Why an entry module and not a ``flexcomm`` sub-command: it prepares a loan of the project's GPU machine (the
Makefile and ``real_backend/gpu_check.sh`` run it), it answers nothing about a cluster. The engine is
:mod:`flexcomm.real_backend.gpu_kit`; this module parses the flags and prints its lines.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from flexcomm.real_backend import gpu_kit


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags; print the image's packages, or build the kit and say what it holds (exit 1 over the
    device's limit)."""
    parser = argparse.ArgumentParser(prog="python -m flexcomm.experiments.commands.gpu_kit",
                                     description=gpu_kit.__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(gpu_kit.ROOT / "gpu-kit"),
                        help="kit folder (default gpu-kit/, ignored by git)")
    parser.add_argument("--print-image-needs", action="store_true", help="print the packages of flexcomm's closure "
                        "the device image already has (name==version as installed here), for the rehearsal venv")
    parser.add_argument("--rehearse-python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="also fetch the binary wheels for this Python, for gpu_check.sh --rehearse "
                        "(default this interpreter's; '' to skip)")
    args = parser.parse_args(argv)
    if args.print_image_needs:
        print(" ".join(f"{name}=={version}" for name, version in gpu_kit.image_needs().items()))
        return 0
    carried = gpu_kit.missing()
    print(f"gpu-kit: flexcomm + {len(carried)} packages the device image lacks: {', '.join(carried)}")
    out = Path(args.out)
    try:
        manifest = gpu_kit.build(out, args.rehearse_python or None, carried)
    except gpu_kit.KitTooLargeError as error:
        print(error, file=sys.stderr)
        return 1
    limit = gpu_kit.LIMIT_BYTES / 2**20
    print(f"gpu-kit: {len(manifest['wheels'])} wheels, {manifest['bytes'] / 2**20:.1f} MiB (limit {limit:.0f} MiB) "
          f"in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
