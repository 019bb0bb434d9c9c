"""The torch models the planner traces: ImageNet ResNets (with ECA), a GPT decoder and GoogLeNet.

They are written here rather than imported from torchvision (not a dependency) and are built on
the ``meta`` device by :mod:`planner.graphs`, so a multi-billion-parameter GPT costs no memory:
only shapes, parameter counts and FLOPs are ever needed. Module layouts follow torchvision's
``resnet18``/``resnet50``/``googlenet`` and GPT-2, so parameter counts can be checked against
published figures (ResNet-18 11,689,512; ResNet-50 25,557,032; GPT-2 small 124,439,808).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from flexcomm.costmodel.errors import InputError
from flexcomm.workloads.models import ECA


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(name, value, "an integer >= 1")
    return value


# --- ResNet / ECA-ResNet (ImageNet layout) ------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, eca_k: int | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.eca = ECA(width, eca_k) if eca_k else None
        self.downsample = _shortcut(cin, width, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.eca is not None:
            out = self.eca(out)
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck (stride on the 3x3); ECA after the last BN as in ECA-Net's code."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, eca_k: int | None = None) -> None:
        super().__init__()
        out = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.eca = ECA(out, eca_k) if eca_k else None
        self.downsample = _shortcut(cin, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.eca is not None:
            out = self.eca(out)
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ImageNetResNet(nn.Module):
    """ResNet-18/34/50/101 for 224px inputs; ``eca`` gives ECA-ResNet (kernel sizes 3, 5, 5, 7 per stage)."""

    _LAYOUT = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)),
               50: (Bottleneck, (3, 4, 6, 3)), 101: (Bottleneck, (3, 4, 23, 3))}
    #: The released ECA-ResNet uses k = 3, 5, 5, 7 for its four stages (BangguWu/ECANet).
    ECA_KERNELS = (3, 5, 5, 7)

    def __init__(self, depth: int = 18, num_classes: int = 1000, eca: bool = False) -> None:
        super().__init__()
        if depth not in self._LAYOUT:
            raise InputError("depth", depth, "one of " + ", ".join(map(str, self._LAYOUT)))
        block, counts = self._LAYOUT[depth]
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        stages = []
        for i, (width, count) in enumerate(zip((64, 128, 256, 512), counts, strict=True)):
            blocks = []
            for b in range(count):
                stride = 2 if i > 0 and b == 0 else 1
                blocks.append(block(cin, width, stride, self.ECA_KERNELS[i] if eca else None))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --- GPT ------------------------------------------------------------------------------------------


class GPTBlock(nn.Module):
    """Pre-norm decoder block, attention as explicit matmuls so every FLOP is counted and traced."""

    def __init__(self, hidden: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.out = nn.Linear(4 * hidden, hidden)
        self.register_buffer("mask", torch.ones(seq_len, seq_len, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = self.hidden // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(self.hidden, dim=-1)
        q = q.view(b, s, self.heads, d).transpose(1, 2)
        k = k.view(b, s, self.heads, d).transpose(1, 2)
        v = v.view(b, s, self.heads, d).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~self.mask, float("-inf"))
        attn = torch.matmul(torch.softmax(scores, dim=-1), v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, h))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2-style decoder with tied input/output embeddings.

    Parameters: V h + S h + L (12 h^2 + 13 h) + 2 h (see :func:`gpt_parameters`).
    """

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, seq_len: int = 1024,
                 vocab: int = 50257) -> None:
        super().__init__()
        for name, value in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", seq_len),
                            ("vocab", vocab)):
            _positive(name, value)
        if hidden % heads:
            raise InputError("heads", heads, f"a divisor of hidden={hidden}")
        self.seq_len = seq_len
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.register_buffer("positions", torch.arange(seq_len), persistent=False)
        self.blocks = nn.Sequential(*(GPTBlock(hidden, heads, seq_len) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe(self.positions)
        x = self.ln_f(self.blocks(x))
        return F.linear(x, self.wte.weight)  # tied LM head


def gpt_parameters(layers: int, hidden: int, seq_len: int, vocab: int) -> int:
    """Closed-form parameter count of :class:`GPT` (tied head): checks a traced graph without allocating."""
    return vocab * hidden + seq_len * hidden + layers * (12 * hidden * hidden + 13 * hidden) + 2 * hidden


# --- Inception (GoogLeNet) ------------------------------------------------------------------------


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, pad, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class InceptionBlock(nn.Module):
    """Four parallel branches (1x1; 1x1-3x3; 1x1-3x3; pool-1x1) concatenated: the multi-branch shape."""

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool: int) -> None:
        super().__init__()
        self.branch1 = ConvBN(cin, c1, 1)
        self.branch2 = nn.Sequential(ConvBN(cin, c3r, 1), ConvBN(c3r, c3, 3, pad=1))
        self.branch3 = nn.Sequential(ConvBN(cin, c5r, 1), ConvBN(c5r, c5, 3, pad=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), ConvBN(cin, pool, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision's GoogLeNet (Inception v1) without the auxiliary heads."""

    _BLOCKS = {
        "3a": (192, 64, 96, 128, 16, 32, 32), "3b": (256, 128, 128, 192, 32, 96, 64),
        "4a": (480, 192, 96, 208, 16, 48, 64), "4b": (512, 160, 112, 224, 24, 64, 64),
        "4c": (512, 128, 128, 256, 24, 64, 64), "4d": (512, 112, 144, 288, 32, 64, 64),
        "4e": (528, 256, 160, 320, 32, 128, 128), "5a": (832, 256, 160, 320, 32, 128, 128),
        "5b": (832, 384, 192, 384, 48, 128, 128),
    }

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = ConvBN(3, 64, 7, 2, 3)
        self.maxpool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = ConvBN(64, 64, 1)
        self.conv3 = ConvBN(64, 192, 3, pad=1)
        self.maxpool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        blocks = {f"inception{k}": InceptionBlock(*v) for k, v in self._BLOCKS.items()}
        for name, block in blocks.items():
            self.add_module(name, block)
        self.maxpool3 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.maxpool4 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4c(self.inception4b(self.inception4a(x)))
        x = self.maxpool4(self.inception4e(self.inception4d(x)))
        x = self.inception5b(self.inception5a(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
