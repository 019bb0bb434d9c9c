"""Models as people name them, each with the configuration it was published with.

Every size below is copied from the cited file (a HuggingFace ``config.json`` at the model's official
repository, or the paper / NeMo recipe where no such file exists); nothing is rounded or guessed. Names of the
published throughput tables (``LLAMA3_70B``, ``DeepSeekV3 (w/o MTP)``, ``GPT3-175B``) resolve through
:func:`resolve_table_name`.
"""

from __future__ import annotations

import re

from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.architecture import Architecture, LatentAttention, MoE


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int,
           source: str) -> Architecture:
    return Architecture(name, layers, hidden, heads, kv, hidden // heads, ffn, vocab, "swiglu", source=source)


def _gpt(name: str, layers: int, hidden: int, heads: int, source: str) -> Architecture:
    """A GPT-3-style model: multi-head attention, 4h GELU MLP, GPT-2's 50,257-token vocabulary, tied."""
    return Architecture(name, layers, hidden, heads, heads, hidden // heads, 4 * hidden, 50257, "gelu",
                        tied_embeddings=True, source=source)


def _nemotron(name: str, layers: int, hidden: int, heads: int, kv: int, source: str) -> Architecture:
    """Nemotron: squared-ReLU 4h MLP, 256,000-token vocabulary, untied."""
    return Architecture(name, layers, hidden, heads, kv, hidden // heads, 4 * hidden, 256000, "relu2", source=source)


_HF = "huggingface.co/{}/blob/main/config.json"

PRESETS: dict[str, Architecture] = {a.name: a for a in (
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, _HF.format("meta-llama/Llama-2-7b-hf")),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, _HF.format("meta-llama/Llama-2-13b-hf")),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, _HF.format("meta-llama/Llama-2-70b-hf")),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, _HF.format("meta-llama/Meta-Llama-3-8B")),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, _HF.format("meta-llama/Meta-Llama-3-70B")),
    _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, _HF.format("meta-llama/Llama-3.1-405B")),
    Architecture("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, moe=MoE(8, 2, 14336),
                 source=_HF.format("mistralai/Mixtral-8x7B-v0.1")),
    Architecture("mixtral-8x22b", 56, 6144, 48, 8, 128, 16384, 32768, moe=MoE(8, 2, 16384),
                 source=_HF.format("mistralai/Mixtral-8x22B-v0.1")),
    Architecture("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, 151936, moe=MoE(128, 8, 768),
                 source=_HF.format("Qwen/Qwen3-30B-A3B")),
    Architecture("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 12288, 151936, moe=MoE(128, 8, 1536),
                 source=_HF.format("Qwen/Qwen3-235B-A22B")),
    Architecture("deepseek-v3", 61, 7168, 128, 128, 128, 18432, 129280,
                 moe=MoE(256, 8, 2048, shared_ffn_hidden=2048, dense_layers=3),
                 mla=LatentAttention(kv_lora_rank=512, qk_head_dim=128, rope_head_dim=64, v_head_dim=128,
                                     q_lora_rank=1536),
                 mtp_layers=1, source=_HF.format("deepseek-ai/DeepSeek-V3")),
    Architecture("gpt-oss-120b", 36, 2880, 64, 8, 64, 2880, 201088, "swiglu-clamped", moe=MoE(128, 4, 2880),
                 window=128, source=_HF.format("openai/gpt-oss-120b")),
    _nemotron("nemotron-8b", 32, 4096, 32, 32, "NeMo recipe nemotron3_8b (NVIDIA NeMo, nemo/collections/llm/recipes)"),
    _nemotron("nemotron-22b", 40, 6144, 48, 48,
              "NeMo recipe nemotron3_22b (NVIDIA NeMo, nemo/collections/llm/recipes)"),
    _nemotron("nemotron-4-340b", 96, 18432, 96, 8, "Nemotron-4 340B Technical Report (NVIDIA, 2024), table 1; "
              + _HF.format("nvidia/Nemotron-4-340B-Base")),
    _gpt("gpt3-5b", 24, 4096, 32, "NeMo recipe gpt3 5B (NVIDIA NeMo, examples/nlp/language_modeling/conf/gpt3_5b)"),
    _gpt("gpt3-20b", 44, 6144, 48, "NeMo recipe gpt3 20B (NVIDIA NeMo, examples/nlp/language_modeling/conf/gpt3_20b)"),
    _gpt("gpt3-175b", 96, 12288, 96, "Brown et al., 'Language Models are Few-Shot Learners' (2020), table 2.1"),
)}


def preset(name: str) -> Architecture:
    """The preset called ``name`` (case and ``_``/``-`` insensitive)."""
    key = name.strip().lower().replace("_", "-")
    if key not in PRESETS:
        raise InputError("model", name, "a preset (" + ", ".join(PRESETS) + ") or a HuggingFace config.json")
    return PRESETS[key]


def resolve_table_name(name: str) -> Architecture:
    """A model as the published tables name it: ``LLAMA3_70B``, ``LLAMA3.1_405B``, ``Qwen3_30B_a3B``,
    ``GPT OSS 120B``, ``DeepSeekV3 (w/o MTP)`` (MTP dropped), ``Nemotron-340B``, ``GPT3-175B``; a ``tokendrop``
    mark (how tokens are routed, read by the table reader) is not part of the architecture."""
    text = name.strip()
    mtp = None
    if "(w/o mtp)" in text.lower():
        mtp = 0
    text = re.sub(r"[\s_-]*\(?tokendrop\)?", "", text, flags=re.IGNORECASE)  # routing, not architecture
    text = re.sub(r"\s*\(.*\)\s*$", "", text)
    key = text.lower().replace("_", "-").replace(" ", "-")
    key = {"deepseekv3": "deepseek-v3", "nemotron-340b": "nemotron-4-340b"}.get(key, key)
    arch = preset(key) if key in PRESETS else None
    if arch is None:
        raise InputError("model", name, "a model name of the published tables (" + ", ".join(PRESETS) + ")")
    return arch if mtp is None else arch.with_mtp(mtp)
