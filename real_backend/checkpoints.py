"""Checkpoint files read without running anything in them.

Why: ``torch.load`` unpickles, and a pickle may name any callable (``os.system`` included), so a checkpoint
that people pass around is a program unless the unpickler refuses code. Every checkpoint flexcomm reads goes
through :func:`load_state`: bounded like every other input (a regular file, at most
:data:`~flexcomm.costmodel.limits.MAX_CHECKPOINT_BYTES`), then torch's weights-only unpickler, which builds
tensors and plain values (dicts, lists, tuples, numbers, strings) and nothing else. What flexcomm saves holds
only those (:func:`random_state` turns numpy's generator state into them).
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_CHECKPOINT_BYTES, read_bytes_bounded

#: How much of torch's own explanation a one-line error keeps.
REASON_CHARACTERS = 90
#: The lines of torch's message that explain its defaults rather than the file.
_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation")


def _reason(error: BaseException) -> str:
    """The part of torch's several-paragraph message that says what was wrong (its advice to load with
    ``weights_only=False`` is the opposite of what to do with a file of unknown origin, so it is left out)."""
    text = str(error)
    named = re.search(r"GLOBAL ([\w.]+)", text)
    if named:
        return f"it names the callable {named[1]}, which a weights-only load refuses to run"
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(_BOILERPLATE)]
    first = (lines[0] if lines else type(error).__name__).split(". ")[0]
    detail = first if len(first) <= REASON_CHARACTERS else first[:REASON_CHARACTERS - 3] + "..."
    return f"it is damaged or not one ({detail})"


def load_state(path: str | Path, field: str = "resume", what: str = "checkpoint") -> dict[str, Any]:
    """The dict a flexcomm checkpoint holds, loaded on the CPU with nothing executed; a file that is not one
    (code in the pickle, a damaged or truncated file, another kind of object) is a one-line InputError."""
    import torch

    data = read_bytes_bounded(path, field, what, MAX_CHECKPOINT_BYTES)
    expected = f"a {what} torch.save wrote, of tensors and plain values"
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, KeyError, AttributeError,
            TypeError) as error:
        raise InputError(field, str(path), f"{expected}; {_reason(error)}") from None
    if not isinstance(state, dict):
        raise InputError(field, str(path), f"{expected}; it holds a {type(state).__name__}, not a dict")
    return state


def random_state(step: int) -> dict[str, Any]:
    """What else a step draws from (dropout, augmentation): torch's, numpy's and Python's generators, as tensors
    and plain values (numpy's state is an array, which a weights-only load would refuse)."""
    import random

    import numpy as np
    import torch

    kind, keys, position, has_gauss, cached = np.random.get_state()
    return {"step": step, "torch": torch.get_rng_state(),
            "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
            "python": random.getstate()}


def restore_random_state(state: dict[str, Any]) -> None:
    """Set the three generators from :func:`random_state`'s dict."""
    import random

    import numpy as np
    import torch

    numpy_state = state["numpy"]
    torch.set_rng_state(state["torch"])
    np.random.set_state((numpy_state["kind"], numpy_state["keys"].numpy().astype(np.uint32),
                         numpy_state["position"], numpy_state["has_gauss"], numpy_state["cached_gaussian"]))
    random.setstate(state["python"])
