"""A model's own HuggingFace ``config.json`` as an :class:`Architecture`.

Why: a user planning a fine-tuned or new model has its ``config.json``, not a preset name. Field names are
those of the ``transformers`` configuration classes (LlamaConfig, MixtralConfig, Qwen3MoeConfig,
DeepseekV3Config, GptOssConfig); an architecture or a field this reader does not know is a one-line error
naming it, never a silent default. The file is parsed as JSON (no code runs) under a size bound.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from flexcomm.costmodel.bounded_stream import read_json_bounded
from flexcomm.costmodel.errors import InputError
from flexcomm.planner.llm.architecture import Architecture, LatentAttention, MoE
from flexcomm.planner.llm.presets import preset

#: SiLU-gated MLPs: what ``hidden_act`` names in these architectures.
_SILU = ("silu", "swish")


class _Fields:
    """Reads a config mapping, naming ``config.FIELD`` in every error."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def int(self, name: str, default: int | None = None) -> int:
        value = self.config.get(name, default)
        if value is None:
            raise InputError(f"config.{name}", "missing", "an integer >= 1 (the architecture needs it)")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"config.{name}", value, "an integer >= 0")
        return value

    def optional_int(self, name: str) -> int | None:
        return None if self.config.get(name) is None else self.int(name)

    def activation(self) -> str:
        act = self.config.get("hidden_act", "silu")
        if act not in _SILU:
            raise InputError("config.hidden_act", act, "silu (the gated MLP these architectures use)")
        return "swiglu"

    def common(self, name: str) -> dict[str, Any]:
        hidden, heads = self.int("hidden_size"), self.int("num_attention_heads")
        head_dim = self.config.get("head_dim") or (hidden // heads if heads else 0)
        return {"name": name, "layers": self.int("num_hidden_layers"), "hidden": hidden, "heads": heads,
                "kv_heads": self.int("num_key_value_heads", heads), "head_dim": head_dim,
                "vocab": self.int("vocab_size"), "tied_embeddings": bool(self.config.get("tie_word_embeddings", False))}


def _llama(f: _Fields, name: str) -> Architecture:
    return Architecture(**f.common(name), ffn_hidden=f.int("intermediate_size"), activation=f.activation())


def _mixtral(f: _Fields, name: str) -> Architecture:
    ffn = f.int("intermediate_size")
    return Architecture(**f.common(name), ffn_hidden=ffn, activation=f.activation(),
                        moe=MoE(f.int("num_local_experts"), f.int("num_experts_per_tok"), ffn))


def _qwen3_moe(f: _Fields, name: str) -> Architecture:
    if f.config.get("mlp_only_layers") or f.int("decoder_sparse_step", 1) != 1:
        raise InputError("config.mlp_only_layers", f.config.get("mlp_only_layers"),
                         "[] with decoder_sparse_step 1 (every layer routed, as the Qwen3 MoE releases)")
    return Architecture(**f.common(name), ffn_hidden=f.int("intermediate_size"), activation=f.activation(),
                        moe=MoE(f.int("num_experts"), f.int("num_experts_per_tok"), f.int("moe_intermediate_size")))


def _deepseek_v3(f: _Fields, name: str) -> Architecture:
    expert_ffn = f.int("moe_intermediate_size")
    moe = MoE(f.int("n_routed_experts"), f.int("num_experts_per_tok"), expert_ffn,
              shared_ffn_hidden=f.int("n_shared_experts", 0) * expert_ffn,
              dense_layers=f.int("first_k_dense_replace", 0))
    mla = LatentAttention(kv_lora_rank=f.int("kv_lora_rank"), qk_head_dim=f.int("qk_nope_head_dim"),
                          rope_head_dim=f.int("qk_rope_head_dim"), v_head_dim=f.int("v_head_dim"),
                          q_lora_rank=f.optional_int("q_lora_rank"))
    common = f.common(name)
    common["head_dim"] = mla.qk_head_dim  # unused by MLA's pricing; the preset states the same
    return Architecture(**common, ffn_hidden=f.int("intermediate_size"), activation=f.activation(), moe=moe, mla=mla,
                        mtp_layers=f.int("num_nextn_predict_layers", 0))


def _gpt_oss(f: _Fields, name: str) -> Architecture:
    ffn = f.int("intermediate_size")
    per_token = f.int("num_experts_per_tok" if "num_experts_per_tok" in f.config else "experts_per_token")
    return Architecture(**f.common(name), ffn_hidden=ffn, activation="swiglu-clamped",
                        moe=MoE(f.int("num_local_experts"), per_token, ffn),
                        window=f.optional_int("sliding_window"))


#: The architectures this reader knows, as ``config.json`` names them in ``architectures``.
READERS: dict[str, Callable[[_Fields, str], Architecture]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _llama,
    "Qwen2ForCausalLM": _llama,
    "Qwen3ForCausalLM": _llama,
    "MixtralForCausalLM": _mixtral,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "GptOssForCausalLM": _gpt_oss,
}


def architecture_from_config(config: object, name: str = "config.json") -> Architecture:
    """An :class:`Architecture` from a parsed ``config.json`` mapping."""
    if not isinstance(config, Mapping):
        raise InputError("config", type(config).__name__, "a JSON object (a HuggingFace config.json)")
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or len(architectures) != 1 or not isinstance(architectures[0], str):
        raise InputError("config.architectures", architectures, "a list of one name, e.g. [\"LlamaForCausalLM\"]")
    reader = READERS.get(architectures[0])
    if reader is None:
        raise InputError("config.architectures", architectures[0], "one of " + ", ".join(READERS))
    return reader(_Fields(config), name)


def load_config(path: str | os.PathLike) -> Architecture:
    """Read ``path`` (a HuggingFace ``config.json``) as an :class:`Architecture` named after its folder."""
    config = read_json_bounded(path, "model", "config.json")
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return architecture_from_config(config, folder or "config.json")


def model_architecture(spec: str) -> Architecture:
    """``--model``'s value: a preset name, or a path ending in ``.json``."""
    if spec.endswith(".json"):
        return load_config(spec)

    return preset(spec)
