"""Small torch models for emulated and real data-parallel training on CPUs.

They are small so a run finishes in seconds on two cores, yet span the shapes a communication
planner cares about: one big dense gradient (MLP), many small conv tensors (ResNet), conv tensors
plus tiny, cheap-but-memory-bound attention ops (ECA-ResNet) and recurrent / attention matmuls
(sequence models). Everything that does arithmetic is written with ``nn.Linear``, ``nn.Conv*d``
or explicit matmuls, because ``torch.utils.flop_counter`` (behind
:func:`costmodel.compute.layers_from_torch`) counts 0 FLOPs for ``nn.LSTM``, for the fused
``nn.TransformerEncoderLayer`` fast path and for CPU ``scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from flexcomm.costmodel.errors import InputError

__all__ = [
    "MLP",
    "SmallCNN",
    "ECA",
    "BasicBlock",
    "ResNet",
    "ECAResNet",
    "LSTMClassifier",
    "TransformerClassifier",
    "eca_kernel_size",
]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(name, value, "an integer >= 1")
    return value


class MLP(nn.Module):
    """Fully connected classifier: flattens its input, ReLU between hidden layers.

    Most of its parameters sit in one or two large matrices, the opposite of a ResNet's many small
    tensors, which is what bucketing and layer-wise compression react to.
    """

    def __init__(self, in_features: int, num_classes: int, hidden: tuple[int, ...] = (128, 64)) -> None:
        super().__init__()
        _positive_int("in_features", in_features)
        _positive_int("num_classes", num_classes)
        sizes = [in_features, *(_positive_int("hidden", h) for h in hidden)]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU(inplace=True)]
        layers.append(nn.Linear(sizes[-1], num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


# --- ECA ----------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """Two 3x3 conv + max-pool stages (16, 32 channels) and a 128-unit hidden layer: the classic small
    Fashion-MNIST baseline shape (the data set's own benchmark has similar 2-conv nets near 90-92 %)."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28) -> None:
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("num_classes", num_classes)
        if _positive_int("image_size", image_size) % 4:
            raise InputError("image_size", image_size, "a multiple of 4 (two 2x2 poolings)")
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * (image_size // 4) ** 2, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.max_pool2d(F.relu(self.conv1(x)), 2)
        out = F.max_pool2d(F.relu(self.conv2(out)), 2)
        return self.fc2(F.relu(self.fc1(out.flatten(1))))


def eca_kernel_size(channels: int, gamma: int = 2, b: int = 1) -> int:
    """ECA-Net's adaptive 1-D kernel size for ``channels`` channels.

    The paper writes k = |log2(C)/gamma + b/gamma|_odd ("nearest odd"); its released code
    (BangguWu/ECANet, ``eca_resnet.py``/``eca_module.py``) computes
    ``t = int(abs((log2(C) + b) / gamma)); k = t if t % 2 else t + 1`` -- truncate, then round an
    even result *up*. The two agree except where the formula lands exactly on an even integer
    (C = 128 gives 4, C = 2048 gives 6), where "nearest odd" is a tie and the code picks the larger
    kernel. We follow the code: 64 -> 3, 128..1024 -> 5, 2048 -> 7; 8..127 -> 3 and 1..7 -> 1, so
    the 16/32/64-wide toy ResNets here all get k = 3.
    """
    _positive_int("channels", channels)
    _positive_int("gamma", gamma)
    if isinstance(b, bool) or not isinstance(b, int) or b < 0:
        raise InputError("b", b, "an integer >= 0")
    t = int(abs((math.log2(channels) + b) / gamma))
    return t if t % 2 else t + 1


class ECA(nn.Module):
    """Efficient Channel Attention: y = x * sigmoid(conv1d_k(GAP(x))) across channels.

    A k-wide, bias-free 1-D convolution over the pooled channel vector gives local cross-channel
    interaction with only k parameters (no dimensionality reduction, unlike squeeze-excitation).
    """

    def __init__(self, channels: int, kernel_size: int | None = None) -> None:
        super().__init__()
        k = eca_kernel_size(channels) if kernel_size is None else _positive_int("kernel_size", kernel_size)
        if k % 2 == 0:
            raise InputError("kernel_size", k, "an odd integer (the output must keep every channel)")
        self.channels = channels
        self.kernel_size = k
        self.conv = nn.Conv1d(1, 1, kernel_size=k, padding=(k - 1) // 2, bias=False)

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """The per-channel scale in (0, 1), shape (N, C, 1, 1): exposed so tests can inspect it."""
        pooled = x.mean(dim=(2, 3))  # (N, C): global average pooling
        weights = self.conv(pooled.unsqueeze(1)).squeeze(1)  # channels as the 1-D sequence
        return torch.sigmoid(weights)[:, :, None, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(x)


# --- ResNet -------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """CIFAR ResNet basic block (two 3x3 convs), optionally with ECA before the residual add.

    The ECA placement (after the second BN, before the addition) is the released ECA-ResNet's.
    The shortcut is a 1x1 conv + BN when the shape changes (He et al.'s option B).
    """

    def __init__(self, cin: int, cout: int, stride: int = 1, eca: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.eca = ECA(cout) if eca else None
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        if self.eca is not None:
            out = self.eca(out)
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity, inplace=True)


class ResNet(nn.Module):
    """CIFAR-style ResNet-(6n+2): 3x3 stem, three stages of n basic blocks (width w, 2w, 4w).

    depth 8 -> n = 1, 14 -> 2, 20 -> 3. Stages 2 and 3 halve the resolution, so any input of 8px
    or more works (16x16 digits, 32x32 synthetic images); global average pooling ends it.
    """

    def __init__(
        self,
        depth: int = 8,
        width: int = 16,
        in_channels: int = 3,
        num_classes: int = 10,
        eca: bool = False,
    ) -> None:
        super().__init__()
        _positive_int("depth", depth)
        if (depth - 2) % 6 != 0 or depth < 8:
            raise InputError("depth", depth, "6n + 2 for n >= 1 (8, 14, 20, 26, ...)")
        _positive_int("width", width)
        _positive_int("in_channels", in_channels)
        _positive_int("num_classes", num_classes)
        blocks = (depth - 2) // 6
        self.depth, self.width, self.eca = depth, width, eca
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        stages: list[nn.Module] = []
        cin = width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            layers = []
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(BasicBlock(cin, cout, stride, eca=eca))
                cin = cout
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.fc(out.mean(dim=(2, 3)))


class ECAResNet(ResNet):
    """The same ResNet with ECA in every basic block (kernel size adapted to each stage's width)."""

    def __init__(self, depth: int = 8, width: int = 16, in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__(depth, width, in_channels, num_classes, eca=True)


# --- sequence models ----------------------------------------------------------------------------


class _LSTMLayer(nn.Module):
    """One LSTM layer from two Linear maps, so the FLOP counter sees its matmuls.

    The input projection runs over all time steps in one matmul; only the recurrent H x 4H matmul
    is stepped. Gate order i, f, g, o as in ``nn.LSTM``; one bias (``nn.LSTM`` carries two).
    """

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.ih = nn.Linear(input_size, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden, bias=False)
        with torch.no_grad():  # forget-gate bias 1: remembers by default (Jozefowicz et al. 2015)
            self.ih.bias.zero_()
            self.ih.bias[hidden : 2 * hidden] = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = x.shape
        gates_x = self.ih(x)
        h = x.new_zeros(batch, self.hidden)
        c = x.new_zeros(batch, self.hidden)
        outputs = []
        for t in range(steps):
            i, f, g, o = (gates_x[:, t] + self.hh(h)).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


class LSTMClassifier(nn.Module):
    """Token embedding -> stacked LSTM -> max over time -> linear head.

    Max-pooling over time lets a motif anywhere in the sequence reach the head directly instead of
    surviving to the last step, which keeps training to a few hundred steps.
    """

    def __init__(
        self, vocab_size: int, num_classes: int, embed: int = 32, hidden: int = 64, num_layers: int = 1
    ) -> None:
        super().__init__()
        sizes = {"vocab_size": vocab_size, "num_classes": num_classes, "embed": embed, "hidden": hidden}
        for name, value in {**sizes, "num_layers": num_layers}.items():
            _positive_int(name, value)
        self.embed = nn.Embedding(vocab_size, embed)
        self.layers = nn.ModuleList(
            _LSTMLayer(embed if i == 0 else hidden, hidden) for i in range(num_layers)
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.amax(dim=1))


class _EncoderBlock(nn.Module):
    """Pre-norm Transformer encoder block with attention as explicit matmuls (countable FLOPs)."""

    def __init__(self, d_model: int, heads: int, ffn: int) -> None:
        super().__init__()
        if d_model % heads:
            raise InputError("heads", heads, f"a divisor of d_model={d_model}")
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, ffn), nn.GELU(), nn.Linear(ffn, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(batch, steps, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, steps, d))
        return x + self.mlp(self.ln2(x))


class TransformerClassifier(nn.Module):
    """Tiny Transformer encoder: token + learned position embeddings, mean-pooled, linear head."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_len: int = 64,
        d_model: int = 32,
        heads: int = 4,
        num_layers: int = 2,
        ffn: int = 64,
    ) -> None:
        super().__init__()
        sizes = {"vocab_size": vocab_size, "num_classes": num_classes, "max_len": max_len, "d_model": d_model}
        for name, value in {**sizes, "heads": heads, "num_layers": num_layers, "ffn": ffn}.items():
            _positive_int(name, value)
        self.embed = nn.Embedding(vocab_size, d_model)
        # Position codes on the token embeddings' scale (N(0, 1)): at GPT's std 0.02 the order of
        # tokens, which the motif task is all about, is drowned out and nothing is learnt.
        self.pos = nn.Parameter(torch.randn(1, max_len, d_model))
        self.blocks = nn.ModuleList(_EncoderBlock(d_model, heads, ffn) for _ in range(num_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        steps = tokens.shape[1]
        if steps > self.pos.shape[1]:
            raise InputError("sequence length", steps, f"at most max_len={self.pos.shape[1]}")
        x = self.embed(tokens) + self.pos[:, :steps]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x).mean(dim=1))
