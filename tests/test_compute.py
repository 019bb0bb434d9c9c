"""Compute-time model: hand values, the zoo against published sizes and against torch's counter."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from flexcomm.costmodel.compute import (
    DEFAULT_EFFICIENCY,
    MODEL_ZOO,
    LayerSpec,
    MeasuredProfile,
    ModelSpec,
    alexnet_spec,
    compute_seconds,
    get_model,
    layers_from_torch,
    resnet_spec,
    transformer_spec,
    vgg16_spec,
)
from flexcomm.costmodel.errors import InputError

# --- compute_seconds ------------------------------------------------------------------------


def test_compute_seconds_hand_values() -> None:
    assert DEFAULT_EFFICIENCY == 0.65
    assert float(compute_seconds(6.5e12, 1e13)) == pytest.approx(1.0, rel=1e-15)  # 6.5e12 / (1e13 * 0.65)
    assert float(compute_seconds(1e12, 1e12, 0.5)) == pytest.approx(2.0, rel=1e-15)
    assert float(compute_seconds(0, 1e12)) == 0.0
    assert float(compute_seconds(3.9e12, "10TFLOP/s", 0.39)) == pytest.approx(1.0, rel=1e-15)


def test_compute_seconds_vectorised() -> None:
    flops = np.array([[1e12], [2e12]])
    peak = np.array([1e12, 2e12, 4e12])
    got = compute_seconds(flops, peak, 0.5)
    assert got.shape == (2, 3)
    assert got.tolist() == [[2.0, 1.0, 0.5], [4.0, 2.0, 1.0]]
    for i in range(2):
        for j in range(3):
            assert float(compute_seconds(flops[i, 0], peak[j], 0.5)) == got[i, j]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"flops": -1.0, "peak_flops": 1e12}, "flops"),
        ({"flops": np.nan, "peak_flops": 1e12}, "flops"),
        ({"flops": "lots", "peak_flops": 1e12}, "flops"),
        ({"flops": 1.0, "peak_flops": 0.0}, "peak_flops"),
        ({"flops": 1.0, "peak_flops": [1e12, -1.0]}, "peak_flops"),
        ({"flops": 1.0, "peak_flops": "fast"}, "peak_flops"),
        ({"flops": 1.0, "peak_flops": 1e12, "efficiency": 0.0}, "efficiency"),
        ({"flops": 1.0, "peak_flops": 1e12, "efficiency": 1.5}, "efficiency"),
        ({"flops": 1.0, "peak_flops": 1e12, "efficiency": np.inf}, "efficiency"),
    ],
)
def test_compute_seconds_rejects(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as err:
        compute_seconds(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


# --- specs ----------------------------------------------------------------------------------


TOY = ModelSpec("toy", [LayerSpec("a", 1000, 2e6), LayerSpec("b", 24, 1e6)], "two layers")


def test_model_sizes_hand_values() -> None:
    assert TOY.params == 1024
    assert TOY.forward_flops == 3e6
    assert TOY.gradient_bytes() == 4096
    assert TOY.gradient_bytes(2) == 2048
    assert TOY.layer_gradient_bytes().tolist() == [4000, 96]
    assert TOY.layer_names == ["a", "b"]


def test_iteration_and_layer_seconds_hand_values() -> None:
    # batch 32, 1 TFLOP/s at 50%: forward 3e6 * 32 / 5e11 = 1.92e-4 s, backward twice that.
    assert float(TOY.iteration_seconds(32, 1e12, 0.5)) == pytest.approx(5.76e-4, rel=1e-12)
    fwd, bwd = TOY.layer_seconds(32, 1e12, 0.5)
    assert fwd.tolist() == pytest.approx([1.28e-4, 6.4e-5], rel=1e-12)
    assert bwd.tolist() == pytest.approx([2.56e-4, 1.28e-4], rel=1e-12)
    assert float(fwd.sum() + bwd.sum()) == pytest.approx(
        float(TOY.iteration_seconds(32, 1e12, 0.5)), rel=1e-12
    )
    # backward_factor 1 (e.g. frozen weights: no weight gradients)
    assert float(TOY.iteration_seconds(32, 1e12, 0.5, backward_factor=1.0)) == pytest.approx(
        3.84e-4, rel=1e-12
    )
    # default efficiency: 0.65
    assert float(TOY.iteration_seconds(1, 1e12)) == pytest.approx(9e6 / 6.5e11, rel=1e-12)


def test_iteration_seconds_vectorised() -> None:
    batch = np.array([1, 8, 32, 128])
    peak = np.array([[1.57e13], [3.12e14]])
    got = TOY.iteration_seconds(batch, peak)
    assert got.shape == (2, 4)
    for i in range(2):
        for j in range(4):
            assert got[i, j] == pytest.approx(float(TOY.iteration_seconds(int(batch[j]), float(peak[i, 0]))))


def test_spec_validation() -> None:
    with pytest.raises(InputError):
        LayerSpec("x", -1, 0.0)
    with pytest.raises(InputError):
        LayerSpec("x", 1.5, 0.0)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        LayerSpec("x", 1, float("nan"))
    with pytest.raises(InputError):
        LayerSpec("", 1, 1.0)
    with pytest.raises(InputError):
        LayerSpec("x", "12", 1.0)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        LayerSpec("x", 1, "many")  # type: ignore[arg-type]
    assert LayerSpec("x", np.int64(3), 2).params == 3  # type: ignore[arg-type]
    with pytest.raises(InputError) as err:
        ModelSpec("dup", [LayerSpec("a", 1, 1.0), LayerSpec("a", 2, 1.0)])
    assert err.value.field == "layers"
    with pytest.raises(InputError):
        ModelSpec("empty", [])
    with pytest.raises(InputError) as err:
        TOY.iteration_seconds(0, 1e12)
    assert err.value.field == "batch_per_rank"
    with pytest.raises(InputError) as err:
        TOY.layer_seconds(np.array([1, 2]), 1e12)  # type: ignore[arg-type]
    assert err.value.field == "batch_per_rank"
    with pytest.raises(InputError) as err:
        TOY.gradient_bytes(0)
    assert err.value.field == "dtype_bytes"


# --- measured profiles ----------------------------------------------------------------------


def test_profile_medians_and_override() -> None:
    profile = MeasuredProfile.from_samples(16, {"a": [(0.5, 1.0), (0.01, 0.02), (0.012, 0.021)]})
    assert profile.layers == {"a": (0.012, 0.021)}  # the warm-up outlier does not move a median
    model = TOY.with_profile(profile)
    fwd, bwd = model.layer_seconds(16, 1e12, 0.5)
    assert fwd.tolist() == pytest.approx([0.012, 1e6 * 16 / 5e11])  # "b" falls back to the FLOP model
    assert bwd.tolist() == pytest.approx([0.021, 2 * 1e6 * 16 / 5e11])
    assert float(model.iteration_seconds(16, 1e12, 0.5)) == pytest.approx(float(fwd.sum() + bwd.sum()))
    # another batch scales the measured times linearly
    fwd32, _ = model.layer_seconds(32, 1e12, 0.5)
    assert fwd32[0] == pytest.approx(0.024)
    assert float(model.iteration_seconds(np.array([16, 32]), 1e12, 0.5)[1]) == pytest.approx(
        0.024 + 0.042 + 3 * 1e6 * 32 / 5e11
    )
    # the model itself is unchanged, and sizes never come from the profile
    assert TOY.profile is None
    assert model.params == TOY.params


def test_profile_rejects_unknown_layers_and_bad_times() -> None:
    with pytest.raises(InputError) as err:
        TOY.with_profile(MeasuredProfile(1, {"c": (0.1, 0.2)}))
    assert err.value.field == "profile"
    with pytest.raises(InputError):
        MeasuredProfile(1, {"a": (-0.1, 0.2)})
    with pytest.raises(InputError):
        MeasuredProfile(1, {"a": (0.1,)})  # type: ignore[dict-item]
    with pytest.raises(InputError):
        MeasuredProfile(0, {"a": (0.1, 0.2)})
    with pytest.raises(InputError):
        MeasuredProfile.from_samples(1, {"a": []})


def test_from_profile() -> None:
    measured = {"conv": (0.002, 0.004), "fc": (0.001, 0.003)}
    model = ModelSpec.from_profile("measured-net", measured, batch_per_rank=8, params={"conv": 100, "fc": 50})
    assert model.layer_names == ["conv", "fc"]
    assert model.gradient_bytes() == 600
    assert float(model.iteration_seconds(8, 1e12)) == pytest.approx(0.010)
    assert float(model.iteration_seconds(4, 1e12)) == pytest.approx(0.005)
    fwd, bwd = model.layer_seconds(8, 1e12)
    assert fwd.tolist() == [0.002, 0.001] and bwd.tolist() == [0.004, 0.003]
    with pytest.raises(InputError):
        ModelSpec.from_profile("bad", measured, params={"attn": 1})


# --- zoo ------------------------------------------------------------------------------------

# Published sizes: torchvision's model table (params; "GFLOPS" there = multiply-accumulates, so
# forward FLOPs per 224px sample are twice that) and GPT-3 XL (Brown et al. 2020).
PUBLISHED = {
    "resnet18": (11.69e6, 2 * 1.82e9),
    "resnet50": (25.56e6, 2 * 4.1e9),
    "vgg16": (138.4e6, 2 * 15.5e9),
    "alexnet": (61.1e6, 2 * 0.71e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_zoo_cnn_totals(name: str) -> None:
    model = get_model(name)
    params, flops = PUBLISHED[name]
    assert model.params == pytest.approx(params, rel=0.02)
    assert model.forward_flops == pytest.approx(flops, rel=0.02)
    assert len(model.layers) >= 8
    assert sum(layer.params for layer in model.layers) == model.params


def test_zoo_transformer() -> None:
    model = get_model("transformer-1.3b")
    d, s, n_layers, vocab = 2048, 2048, 24, 50257
    assert model.params == pytest.approx(1.3e9, rel=0.02)
    # Megatron's count (Narayanan et al. 2021), forward only: 24 s l d^2 (1 + s/6d) + 2 s d V
    assert model.forward_flops == pytest.approx(
        24 * s * n_layers * d * d * (1 + s / (6 * d)) + 2 * s * d * vocab
    )
    # without the attention scores it is the 2 x params x seq rule of thumb
    attention = n_layers * 4 * s * s * d
    assert model.forward_flops - attention == pytest.approx(2 * model.params * s, rel=0.02)
    blocks = [layer for layer in model.layers if layer.name.startswith("blocks.")]
    assert len(blocks) == 4 * n_layers
    per_block = sum(layer.params for layer in blocks[:4])
    assert per_block == 12 * d * d + 13 * d


def test_zoo_layer_lists_look_like_the_real_networks() -> None:
    r18 = get_model("resnet18")
    assert sum(1 for layer in r18.layers if "conv" in layer.name or "downsample.0" in layer.name) == 20
    assert r18.layers[0].name == "conv1" and r18.layers[-1].name == "fc"
    assert r18.layers[0].params == 9408 and r18.layers[-1].params == 513_000
    vgg = get_model("vgg16")
    biggest = max(vgg.layers, key=lambda layer: layer.params)
    assert (biggest.name, biggest.params) == ("classifier.0", 25088 * 4096 + 4096)
    assert len(vgg.layers) == 16
    r50 = get_model("resnet50")
    assert len([layer for layer in r50.layers if layer.forward_flops > 0]) == 54  # 53 convs + fc


def test_get_model_errors_and_case() -> None:
    assert get_model("ResNet50") is MODEL_ZOO["resnet50"]
    with pytest.raises(InputError) as err:
        get_model("resnet151")
    assert err.value.field == "model"
    for name in MODEL_ZOO:
        assert name in str(err.value)


def test_zoo_iteration_time_is_plausible() -> None:
    # ResNet-50 at batch 32 on a V100 (15.7 TFLOP/s fp32): 3 x 8.18 GFLOP x 32 / (0.65 x 15.7e12)
    t = float(get_model("resnet50").iteration_seconds(32, "15.7TFLOP/s"))
    assert t == pytest.approx(3 * 8.178368512e9 * 32 / (0.65 * 15.7e12), rel=1e-9)
    assert 0.05 < t < 0.15


# --- layers_from_torch ----------------------------------------------------------------------


def test_layers_from_torch_mlp() -> None:
    batch = 3
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    spec = layers_from_torch(mlp, torch.randn(batch, 8), name="mlp")
    assert spec.name == "mlp"
    assert spec.layer_names == ["0", "2"]
    assert [layer.params for layer in spec.layers] == [8 * 16 + 16, 16 * 4 + 4]
    for layer, (fan_in, fan_out) in zip(spec.layers, [(8, 16), (16, 4)], strict=True):
        assert layer.forward_flops * batch == 2 * fan_in * fan_out * batch
    assert spec.params == sum(p.numel() for p in mlp.parameters())


class _Custom(nn.Module):
    """A container with a parameter and a matmul of its own, and a tied weight."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4, 4))
        self.inner = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.tied = nn.Linear(4, 4, bias=False)
        self.tied.weight = self.inner.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tied(self.norm(self.inner(x @ self.scale)))


def test_layers_from_torch_containers_ties_and_modes() -> None:
    model = _Custom().train()
    before = model.norm.running_mean.clone()
    spec = layers_from_torch(model, torch.randn(5, 4))
    by_name = {layer.name: layer for layer in spec.layers}
    assert by_name["_Custom"].params == 16 and by_name["_Custom"].forward_flops == 2 * 4 * 4
    assert by_name["inner"].params == 20
    assert by_name["norm"].params == 8 and by_name["norm"].forward_flops == 0
    assert by_name["tied"].params == 0 and by_name["tied"].forward_flops == 2 * 4 * 4  # weight counted once
    assert spec.params == sum(p.numel() for p in model.parameters())  # parameters() dedupes ties too
    assert model.training and model.norm.training  # modes restored
    assert torch.equal(model.norm.running_mean, before)  # statistics untouched
    with pytest.raises(InputError):
        layers_from_torch(nn.ReLU(), torch.randn(2, 2))


# Minimal torchvision-shaped networks, built on the meta device: shapes and FLOPs without memory.


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = _downsample(cin, width, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.downsample = _downsample(cin, width * 4, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(torch.relu(self.bn2(self.conv2(out)))))
        return torch.relu(out + (self.downsample(x) if self.downsample is not None else x))


def _downsample(cin: int, cout: int, stride: int) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class _ResNet(nn.Module):
    def __init__(self, block: type[_Basic] | type[_Bottleneck], counts: list[int]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        for stage, (width, count) in enumerate(zip([64, 128, 256, 512], counts, strict=True), start=1):
            blocks = []
            for b in range(count):
                blocks.append(block(cin, width, 2 if stage > 1 and b == 0 else 1))
                cin = width * block.expansion
            setattr(self, f"layer{stage}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        for stage in range(1, 5):
            x = getattr(self, f"layer{stage}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


class _FeaturesClassifier(nn.Module):
    """torchvision's VGG/AlexNet layout: features, adaptive average pool, classifier."""

    def __init__(self, features: nn.Sequential, pool: int, classifier: nn.Sequential) -> None:
        super().__init__()
        self.features, self.avgpool, self.classifier = features, nn.AdaptiveAvgPool2d(pool), classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _vgg16() -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for item in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]:
        if item == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, int(item), 3, padding=1), nn.ReLU()]
            cin = int(item)
    classifier = nn.Sequential(
        nn.Linear(25088, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
        nn.Linear(4096, 1000),
    )  # fmt: skip
    return _FeaturesClassifier(nn.Sequential(*layers), 7, classifier)


def _alexnet() -> nn.Module:
    features = nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
    )  # fmt: skip
    classifier = nn.Sequential(
        nn.Dropout(), nn.Linear(9216, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, 1000),
    )  # fmt: skip
    return _FeaturesClassifier(features, 6, classifier)


@pytest.mark.parametrize(
    ("spec", "build", "size"),
    [
        (resnet_spec(18), lambda: _ResNet(_Basic, [2, 2, 2, 2]), 224),
        (resnet_spec(50, image_size=160), lambda: _ResNet(_Bottleneck, [3, 4, 6, 3]), 160),
        (vgg16_spec(), _vgg16, 224),
        (alexnet_spec(), _alexnet, 224),
    ],
    ids=["resnet18", "resnet50-160px", "vgg16", "alexnet"],
)
def test_zoo_matches_torch_flop_counter(spec: ModelSpec, build: object, size: int) -> None:
    """The zoo's hand-built layer lists equal what FlopCounterMode counts on the real module tree."""
    with torch.device("meta"):
        module = build()  # type: ignore[operator]
        counted = layers_from_torch(module, torch.empty(2, 3, size, size))
    assert counted.layer_names == spec.layer_names
    assert [layer.params for layer in counted.layers] == [layer.params for layer in spec.layers]
    assert [layer.forward_flops for layer in counted.layers] == [layer.forward_flops for layer in spec.layers]


def test_transformer_builder_small() -> None:
    spec = transformer_spec("tiny", num_layers=2, d_model=8, seq_len=4, vocab=10, tied_embeddings=False)
    assert spec.layers[-1].params == 80
    assert spec.params == 10 * 8 + 4 * 8 + 2 * (12 * 64 + 13 * 8) + 16 + 80
    attn = spec.layers[3]
    assert attn.name == "blocks.0.attn" and attn.forward_flops == 2 * 4 * 64 * 4 + 4 * 16 * 8


def test_costmodel_compute_does_not_import_torch() -> None:
    code = "import sys, costmodel.compute; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
