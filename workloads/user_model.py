"""The user's own model: ``module.path:factory`` or ``path/to/file.py:factory`` as a workload.

Why: the people this workbench is for arrive with a model in their repository, not one of the zoo's. A factory
is the least they can give: a function of no arguments returning an ``nn.Module``, or ``(module, example)``
where ``example`` is an input batch (a tensor or a tuple of positional tensors) or one sample's shape (a tuple of
ints: a float batch of that shape is made). Without an example, the first layer that takes the input says what
it expects (``nn.Linear``: its in_features; ``nn.Conv2d``: its in_channels at 224 x 224; ``nn.Conv1d``: its
in_channels over 128 steps; ``nn.Embedding``: 128 token ids), and anything else is one error line asking for one.

Every failure is one :class:`InputError` naming the reference and what went wrong: a module path that does not
import, a file that does not exist, no such factory, a factory that raises or returns something that is not an
``nn.Module``, an example that is neither a tensor nor a shape.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flexcomm.costmodel.compute import layers_from_torch
from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.names import FACTORY_FORM, is_factory_reference

#: Samples per example batch when the factory gives a shape or nothing (what the FLOP counter runs).
EXAMPLE_BATCH = 8
#: Tokens per sample for a model whose first layer is an embedding, and steps for a Conv1d.
DEFAULT_SEQUENCE = 128
#: Pixels per side for a model whose first layer is a Conv2d.
DEFAULT_IMAGE = 224


def is_reference(text: object) -> bool:
    """Whether ``text`` names a factory (``module:factory`` or ``file.py:factory``), not a zoo model."""
    return is_factory_reference(text)


@dataclass(frozen=True)
class UserModel:
    """A built user model: its name (the factory's), the module and an example input batch."""

    reference: str
    name: str
    module: nn.Module
    example: Any
    #: what the example input is and where it came from (printed beside every price of the model)
    input_text: str = ""

    @property
    def batch_size(self) -> int:
        first = self.example[0] if isinstance(self.example, tuple) else self.example
        return int(first.shape[0])

    def spec(self):  # -> costmodel.compute.ModelSpec
        """Per-layer parameters and forward FLOPs per sample, counted as the zoo's workloads are."""
        with fenced(self.reference, "a model whose forward runs on its example input"):
            spec = layers_from_torch(self.module, self.example, name=self.name,
                                     description=f"{self.reference} (counted by torch.utils.flop_counter)")
        return spec


#: Characters of a user's exception message kept in the one line (a factory once raised 2 MB of text).
MESSAGE_CHARS = 160


def _what_happened(exc: BaseException) -> str:
    """A user's exception as a short phrase: its type and the first line of its message, cut to a readable
    length; ``SystemExit`` and ``KeyboardInterrupt`` said as what they are."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"[:MESSAGE_CHARS]
    if isinstance(exc, KeyboardInterrupt):
        return "it raised KeyboardInterrupt"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + f"... ({len(str(exc)):,} characters)"
    return f"it raised {type(exc).__name__}" + (f": {text}" if text else "")


@contextmanager
def fenced(reference: str, expected: str) -> Iterator[None]:
    """Run a user's code (their module's import, factory, forward) so that nothing it does ends or garbles
    flexcomm: an exception, ``SystemExit`` or ``KeyboardInterrupt`` raised inside becomes one
    :class:`InputError` naming the reference (``expected`` says what it should have done), and what it prints
    goes to a buffer, not to flexcomm's stdout (a ``--json`` answer stays JSON), with one note on stderr."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    except InputError:
        raise  # flexcomm's own check on what the code returned
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 (the user's code: reported in one line)
        raise InputError("model", reference, f"{expected} ({_what_happened(exc)})") from None
    finally:
        lines = printed.getvalue().splitlines()
        if lines:
            print(f"flexcomm: note: model {reference} printed {len(lines):,} line(s) to stdout; left out of "
                  "flexcomm's output", file=sys.stderr)


def _import(reference: str, where: str) -> Any:
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise InputError("model", reference, f"a factory in an existing file ({where} does not exist)")
        name = f"flexcomm_user_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise InputError("model", reference, f"a Python file ({where} cannot be loaded)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with fenced(reference, f"a file that imports ({where})"):
                spec.loader.exec_module(module)
        except InputError:
            sys.modules.pop(name, None)
            raise
        return module
    with fenced(reference, "a module path that imports"):
        module = importlib.import_module(where)
    return module


def load_factory(reference: str) -> Callable[[], Any]:
    """The factory a reference names (imported, not yet called)."""
    if not is_reference(reference):
        raise InputError("model", reference, FACTORY_FORM)
    where, factory = reference.rsplit(":", 1)
    module = _import(reference, where)
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise InputError("model", reference, f"a callable {factory!r} in {where}")
    return fn


#: The layers whose input the factory need not describe (see the module doc).
INPUT_LAYERS = (nn.Linear, nn.Conv2d, nn.Conv1d, nn.Embedding)


def _first_input_layer(module: nn.Module) -> nn.Module | None:
    return next((layer for layer in module.modules() if isinstance(layer, INPUT_LAYERS)), None)


def _example_of_shape(shape: tuple, module: nn.Module, reference: str) -> torch.Tensor:
    """A batch of one sample's ``shape``: token ids when the first layer is an embedding (a float batch crashed
    its lookup), floats otherwise."""
    if not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape):
        raise InputError("model", reference, "an example input: a tensor, a tuple of tensors or one sample's shape "
                         f"as positive ints (the factory returned {shape!r})")
    first = _first_input_layer(module)
    if isinstance(first, nn.Embedding):
        return torch.randint(0, first.num_embeddings, (EXAMPLE_BATCH, *shape))
    return torch.randn(EXAMPLE_BATCH, *shape)


def _inferred_example(module: nn.Module, reference: str) -> torch.Tensor:
    """An example batch from the first layer that takes the input (see the module doc)."""
    layer = _first_input_layer(module)
    if isinstance(layer, nn.Linear):
        return torch.randn(EXAMPLE_BATCH, layer.in_features)
    if isinstance(layer, nn.Conv2d):
        return torch.randn(EXAMPLE_BATCH, layer.in_channels, DEFAULT_IMAGE, DEFAULT_IMAGE)
    if isinstance(layer, nn.Conv1d):
        return torch.randn(EXAMPLE_BATCH, layer.in_channels, DEFAULT_SEQUENCE)
    if isinstance(layer, nn.Embedding):
        return torch.randint(0, layer.num_embeddings, (EXAMPLE_BATCH, DEFAULT_SEQUENCE))
    raise InputError("model", reference, "a factory that returns (module, example input) or (module, input shape): "
                     "its first layer does not say what input it takes")


def describe_input(example: Any, origin: str) -> str:
    """``input 8 x 128 int64 (assumed from its first layer (Embedding); ...)``: what a priced step ran on."""
    tensors = example if isinstance(example, tuple) else (example,)
    shapes = ", ".join(" x ".join(str(n) for n in t.shape) + f" {str(t.dtype).removeprefix('torch.')}"
                       for t in tensors)
    return f"input {shapes} ({origin})"


def build_user_model(reference: str) -> UserModel:
    """Call the factory and check what it returns (see the module doc)."""
    factory = load_factory(reference)
    with fenced(reference, "a factory that runs"):
        built = factory()
    module, example = (built if isinstance(built, tuple) and len(built) == 2 else (built, None))
    if not isinstance(module, nn.Module):
        raise InputError("model", reference, "a factory returning an nn.Module, or (module, example input or shape) "
                         f"(it returned {type(built).__name__})")
    origin = "given by the factory"
    if example is None:
        example = _inferred_example(module, reference)
        first = type(_first_input_layer(module)).__name__
        origin = f"assumed from its first layer ({first}); return (module, example or shape) to say otherwise"
    elif isinstance(example, torch.Tensor):
        if example.dim() == 0:
            raise InputError("model", reference, "an example input with a batch dimension")
    elif isinstance(example, tuple) and example and all(isinstance(t, torch.Tensor) for t in example):
        pass
    elif isinstance(example, (tuple, list)):
        example = _example_of_shape(tuple(example), module, reference)
        origin = f"a batch of {EXAMPLE_BATCH} of the factory's sample shape"
    else:
        raise InputError("model", reference, "an example input: a tensor, a tuple of tensors or one sample's shape "
                         f"(the factory returned {type(example).__name__})")
    name = reference.rsplit(":", 1)[1]
    return UserModel(reference, name, module, example, describe_input(example, origin))
