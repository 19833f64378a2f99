"""Model architecture: Hugging Face `config.json` field names, read per `model_type`.

An `Architecture` is the canonical, validated description the estimator works from.
It is built three ways: from a preset (whose file embeds the published `config.json`), from a
pasted `config.json` (`from_hf_config`, unknown keys ignored) or from an explicit dict of
the same field names (strict: unknown keys are an error).

What differs between families is not the field names but the module structure behind them
(norm kind, MLP kind, biases, fused projections, extra norms). `Traits` holds those
structural facts, looked up from `model_type` once, so formulas never branch on family names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .errors import FieldError, rule, shown

ModelType = Literal[
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2",
    "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss",
]
SUPPORTED_MODEL_TYPES: tuple[str, ...] = ModelType.__args__  # type: ignore[attr-defined]

# Guards against typos that would silently produce absurd numbers (e.g. vocab 1e12).
_MAX_DIM = 1 << 20
_MAX_VOCAB = 1 << 24


class Architecture(BaseModel):
    """A decoder-only transformer, in Hugging Face `config.json` vocabulary."""

    # strict: an integer field takes an integer, not true or "32"; no NaN or infinity
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    model_type: ModelType = "llama"
    hidden_size: int = Field(gt=0, le=_MAX_DIM)
    num_hidden_layers: int = Field(gt=0, le=4096)
    num_attention_heads: int = Field(gt=0, le=4096)
    num_key_value_heads: int | None = Field(default=None, gt=0, le=4096)
    head_dim: int | None = Field(default=None, gt=0, le=4096)
    intermediate_size: int = Field(gt=0, le=_MAX_DIM)
    vocab_size: int = Field(gt=0, le=_MAX_VOCAB)
    max_position_embeddings: int = Field(default=4096, gt=0, le=1 << 24)
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    attention_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    resid_pdrop: float = Field(default=0.0, ge=0.0, lt=1.0)
    embd_pdrop: float = Field(default=0.0, ge=0.0, lt=1.0)
    # A classification head of num_labels outputs in place of the LM head (transformers'
    # *ForSequenceClassification / *ForTokenClassification: reward models, PPO critics).
    num_labels: int | None = Field(default=None, gt=0, le=_MAX_VOCAB)
    final_logit_softcapping: float | None = Field(default=None, gt=0)
    attn_logit_softcapping: float | None = Field(default=None, gt=0)
    # Mixture of experts (Mixtral, Qwen MoE, DeepSeek-V3 names mapped onto these).
    num_local_experts: int = Field(default=0, ge=0, le=4096)
    num_experts_per_tok: int = Field(default=0, ge=0, le=4096)
    moe_intermediate_size: int | None = Field(default=None, gt=0, le=_MAX_DIM)
    shared_expert_intermediate_size: int = Field(default=0, ge=0, le=_MAX_DIM)
    first_k_dense_replace: int = Field(default=0, ge=0)
    decoder_sparse_step: int = Field(default=1, ge=1)
    mlp_only_layers: tuple[StrictInt, ...] = Field(default=(), strict=False)  # a JSON list
    # Sliding-window attention (Gemma 3's layer_types): the window, and the layers with it.
    sliding_window: int | None = Field(default=None, gt=0, le=1 << 24)
    sliding_layers: tuple[StrictInt, ...] = Field(default=(), strict=False)  # a JSON list
    # Multi-head latent attention (DeepSeek-V2/V3).
    q_lora_rank: int | None = Field(default=None, gt=0, le=_MAX_DIM)
    kv_lora_rank: int | None = Field(default=None, gt=0, le=_MAX_DIM)
    qk_nope_head_dim: int | None = Field(default=None, gt=0, le=4096)
    qk_rope_head_dim: int | None = Field(default=None, gt=0, le=4096)
    v_head_dim: int | None = Field(default=None, gt=0, le=4096)

    @field_validator("hidden_act")
    @classmethod
    def _known_activation(cls, v: str) -> str:
        if v not in ACTIVATIONS:
            raise ValueError(f"unknown activation {v!r}; known: {', '.join(sorted(ACTIVATIONS))}")
        return v

    # Cross-field rules sit on the field they constrain (its predecessors are in info.data), so
    # the error names that field: `model.num_key_value_heads`, not just `model`.
    @field_validator("num_key_value_heads")
    @classmethod
    def _kv_divides_heads(cls, k: int | None, info: ValidationInfo) -> int | None:
        a = info.data.get("num_attention_heads")
        if k is not None and a and a % k:
            raise ValueError(f"must divide num_attention_heads ({a}), got {k}")
        return k

    @field_validator("num_experts_per_tok")
    @classmethod
    def _top_k_within_experts(cls, top_k: int, info: ValidationInfo) -> int:
        experts = info.data.get("num_local_experts", 0)
        if experts and not 0 < top_k <= experts:
            raise ValueError(f"must be between 1 and num_local_experts ({experts})")
        if not experts and top_k:
            raise ValueError("is set but num_local_experts is 0")
        return top_k

    @field_validator("first_k_dense_replace")
    @classmethod
    def _dense_within_layers(cls, n: int, info: ValidationInfo) -> int:
        layers = info.data.get("num_hidden_layers")
        if layers and n > layers:
            raise ValueError(f"cannot exceed num_hidden_layers ({layers})")
        return n

    @field_validator("mlp_only_layers", "sliding_layers")
    @classmethod
    def _layers_in_range(cls, ids: tuple[int, ...], info: ValidationInfo) -> tuple[int, ...]:
        layers = info.data.get("num_hidden_layers")
        bad = [i for i in ids if layers and not 0 <= i < layers]
        if bad:
            raise ValueError(f"has layer indices out of range: {bad}")
        return ids

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.is_mla:
            missing = [
                n for n in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
                if getattr(self, n) is None
            ]
            if missing:
                raise ValueError(f"multi-head latent attention needs {', '.join(missing)}")
        elif self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}) unless head_dim is given"
            )
        return self

    # Derived quantities: computed, never stored.
    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Per-head dimension of queries and keys (`head_dim`, else hidden / heads)."""
        if self.head_dim is not None:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def head_outputs(self) -> int:
        """The head's outputs per token: num_labels for a classification head, else the
        vocabulary (the LM head's logits)."""
        return self.num_labels or self.vocab_size

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_local_experts > 0

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    def is_moe_layer(self, i: int) -> bool:
        """Whether decoder layer `i` has routed experts (HF's per-family rules, unified)."""
        if not self.is_moe or i < self.first_k_dense_replace or i in self.mlp_only_layers:
            return False
        return (i + 1) % self.decoder_sparse_step == 0

    @property
    def mask_kinds(self) -> int:
        """The attention masks transformers builds for a forward: a causal one and a sliding
        window's where some layers slide and some do not (Gemma 2 and 3, GPT-OSS), else one
        (Mistral and Phi-3 slide in every layer)."""
        every = len(self.sliding_layers) == self.num_hidden_layers
        return 2 if self.sliding_layers and not every else 1

    def is_sliding_layer(self, i: int) -> bool:
        """Whether decoder layer `i` attends within `sliding_window` (layer_types)."""
        return self.sliding_window is not None and i in self.sliding_layers

    @property
    def moe_layer_count(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    @property
    def traits(self) -> Traits:
        return TRAITS[self.model_type]


@dataclass(frozen=True, slots=True)
class Traits:
    """Module structure of a family, as its Hugging Face modeling file builds it."""

    norm: Literal["rms", "layer"]  # LayerNorm carries a bias
    norm_upcast: Literal["llama", "gemma", "fp32_weight", "native"]  # how the norm handles
    # dtypes (see activations); fp32_weight: Llama's, the weight multiplied in fp32 (GPT-OSS)
    norms_per_layer: int  # 2, or 4 for Gemma 2/3's sandwich norms
    qk_norm: bool  # per-head RMSNorm on q and k (Qwen3, Gemma 3)
    mlp: Literal["gated", "plain"]
    fused_qkv: bool  # one projection for q, k, v (Phi-3, GPT-2)
    fused_gate_up: bool  # one projection for gate and up (Phi-3)
    qkv_bias: bool | None  # None: follow `attention_bias`
    o_bias: bool | None
    mlp_bias: bool | None  # None: follow `mlp_bias`
    learned_positions: bool  # GPT-2's wpe table
    embed_scale: bool  # Gemma multiplies embeddings by sqrt(hidden)
    shared_expert_gate: bool  # Qwen2-MoE gates its shared expert
    rotary: Literal["add", "cat", "none"] = "add"  # how q, k are rotated (see activations)
    router_fp32: bool = False  # DeepSeek-V3's router casts its input and weight to fp32
    routing_fp32: bool = False  # the routing weights stay fp32 (Mixtral, DeepSeek-V3), not the
    # router logits' dtype (Qwen-MoE casts them back)
    moe_leaf: bool = False  # DeepSpeed ZeRO-3 hooks the sparse MoE block as one leaf module
    # (its DEFAULT_LEAF_MODULE_CLASSES: Mixtral, Qwen2-MoE, Qwen3-MoE), not its experts apart
    experts_first: bool = False  # the MoE block builds its experts before its router (the
    # order of their parameters, in which ZeRO-3 queues a leaf block's for prefetch)
    peft_moe: bool = False  # peft converts `all-linear` for the v5 stacked experts (its
    # _MODEL_TO_CONVERSION_PATTERN: Mixtral, Qwen3-MoE, DeepSeek-V3; not Qwen2-MoE itself)
    router_bias: bool = False  # the router's linear has a bias (GPT-OSS)
    router_top_k: bool = False  # the router softmaxes its top-k logits, not all (GPT-OSS)
    sinks: bool = False  # a learned attention-sink logit per head (GPT-OSS): one more column
    # in the eager softmax, which SDPA cannot take (transformers refuses it)
    clamped_glu: bool = False  # the experts' SwiGLU clamps gate and up and scales up + 1
    # (GPT-OSS's _apply_gate), keeping three more intermediate-wide tensors
    softmax_upcast: bool = True  # eager attention softmaxes in fp32 (dtype=torch.float32);
    # GPT-2's in the scores' dtype, fp32 only under autocast
    experts_transposed: bool = False  # the stacked experts are stored (experts, in, out) and
    # multiplied as they are (GPT-OSS): the grouped GEMM saves the parameter itself, not a
    # transposed view of its storage, so DeepSpeed's release frees the gathered weight


_LLAMA = Traits(
    norm="rms", norm_upcast="llama", norms_per_layer=2, qk_norm=False, mlp="gated",
    fused_qkv=False, fused_gate_up=False, qkv_bias=None, o_bias=None, mlp_bias=None,
    learned_positions=False, embed_scale=False, shared_expert_gate=False,
)
def _with(base: Traits, **changes: Any) -> Traits:
    fields = {name: getattr(base, name) for name in Traits.__slots__}
    fields.update(changes)
    return Traits(**fields)


TRAITS: dict[str, Traits] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": _with(_LLAMA, routing_fp32=True, moe_leaf=True, peft_moe=True),
    "deepseek_v3": _with(_LLAMA, router_fp32=True, routing_fp32=True, experts_first=True,
                         peft_moe=True),
    "qwen2": _with(_LLAMA, qkv_bias=True, o_bias=False, mlp_bias=False),
    "qwen2_moe": _with(_LLAMA, qkv_bias=True, o_bias=False, mlp_bias=False, shared_expert_gate=True,
                       moe_leaf=True),
    "qwen3": _with(_LLAMA, qk_norm=True, mlp_bias=False),
    "qwen3_moe": _with(_LLAMA, qk_norm=True, mlp_bias=False, moe_leaf=True, experts_first=True,
                       peft_moe=True),
    "gemma": _with(_LLAMA, norm_upcast="gemma", embed_scale=True, mlp_bias=False),
    "gemma2": _with(_LLAMA, norm_upcast="gemma", norms_per_layer=4, embed_scale=True, mlp_bias=False),
    "gemma3_text": _with(
        _LLAMA, norm_upcast="gemma", norms_per_layer=4, qk_norm=True, embed_scale=True,
        mlp_bias=False,
    ),
    "gpt_oss": _with(_LLAMA, norm_upcast="fp32_weight", mlp_bias=True, router_bias=True,
                     router_top_k=True, sinks=True, clamped_glu=True, experts_transposed=True),
    "phi3": _with(_LLAMA, fused_qkv=True, fused_gate_up=True, qkv_bias=False, o_bias=False,
                  mlp_bias=False, rotary="cat"),
    "gpt2": Traits(
        norm="layer", norm_upcast="native", norms_per_layer=2, qk_norm=False, mlp="plain",
        fused_qkv=True, fused_gate_up=False, qkv_bias=True, o_bias=True, mlp_bias=True,
        learned_positions=True, embed_scale=False, shared_expert_gate=False, rotary="none",
        softmax_upcast=False,
    ),
}

# Activation functions HF configs name, mapped to how their autograd saves (see activations.py).
ACTIVATIONS: dict[str, Literal["native", "gelu_new"]] = {
    "silu": "native", "swish": "native", "gelu": "native", "relu": "native",
    "gelu_pytorch_tanh": "native", "gelu_fast": "gelu_new", "gelu_new": "gelu_new",
    "gelu_python": "native",
}


# ---------------------------------------------------------------------------------------------
# Reading a pasted config.json
# ---------------------------------------------------------------------------------------------

class ConfigError(FieldError):
    """A `config.json` that cannot be read; `field` names the offending key."""


_CLASSIFIERS = ("ForSequenceClassification", "ForTokenClassification")


def from_hf_config(config: dict[str, Any]) -> tuple[Architecture, list[str]]:
    """Read a Hugging Face `config.json` (unknown keys ignored) into an `Architecture`.

    Returns the architecture and notes for the report (e.g. an unsupported `model_type` read as
    llama-like). Raises `ConfigError` naming the key when a required field is missing or
    malformed.
    """
    if not isinstance(config, dict):
        raise ConfigError("hf_config", "must be a JSON object (the contents of config.json)")
    notes: list[str] = []
    cfg = config
    model_type = cfg.get("model_type")
    if isinstance(cfg.get("vision_config"), dict):
        raise ConfigError("hf_config.vision_config", "vision-language models are not modelled: "
                          "the vision tower's parameters and activations depend on the images. "
                          "Paste the language model's config (its text_config) to estimate it "
                          "without the vision tower")
    if model_type not in SUPPORTED_MODEL_TYPES and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]  # multimodal wrappers (e.g. Gemma 3) nest the language model
        notes.append(f"read the text_config of model_type {model_type!r}")
        model_type = cfg.get("model_type", model_type)
    if model_type == "gemma3":
        model_type = "gemma3_text"
    unknown = model_type not in SUPPORTED_MODEL_TYPES
    if model_type not in SUPPORTED_MODEL_TYPES:
        notes.append(
            f"model_type {model_type!r} is not one the estimator knows; read as llama-like "
            "(RMSNorm, gated MLP, no biases unless attention_bias/mlp_bias say so)"
        )
        model_type = "llama"
    reader = _READERS.get(model_type, _read_llama)
    fields = reader(cfg)
    if unknown and (routed := _routed_experts(cfg)):  # dropping them would count a tenth
        fields.update(routed)
        notes.append(
            f"its {routed['num_local_experts']} routed experts (top "
            f"{routed['num_experts_per_tok']}) are read as Mixtral's, every layer sparse, "
            "none shared: their parameters counted, their activations as Mixtral's")
    fields["model_type"] = model_type
    heads = config.get("architectures")
    if isinstance(heads, list) and any(isinstance(a, str) and a.endswith(_CLASSIFIERS)
                                       for a in heads):
        labels = config.get("id2label")
        fields["num_labels"] = config.get("num_labels", len(labels) if isinstance(
            labels, dict) and labels else 2)  # PretrainedConfig's default: 2
        notes.append(f"architectures {heads[0]}: a classification head of "
                     f"{fields['num_labels']} outputs in place of the LM head")
    try:
        arch = Architecture.model_validate(fields)
    except ValidationError as exc:  # re-raise naming the config.json key
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"]) or "hf_config"
        raise ConfigError(f"hf_config.{loc}", rule(err)) from None
    return arch, notes


# Reading config.json values strictly: an integer is an integer (not "32", not 1.5, not true),
# a flag is true or false, so nothing is ever multiplied as a string or silently truncated.

def _value(cfg: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    for name in names:
        if cfg.get(name) is not None:
            return name, cfg[name]
    return names[0], None


def _int(cfg: dict[str, Any], *names: str, default: int | None = None) -> int | None:
    """The first of `names` that is set, as an integer; `default` when none is."""
    name, value = _value(cfg, names)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not value.is_integer()):  # 1.5, inf, nan
        raise ConfigError(f"hf_config.{name}", f"must be an integer, got {shown(value)}")
    return int(value)


def _require(cfg: dict[str, Any], *names: str) -> int:
    value = _int(cfg, *names)
    if value is None:
        raise ConfigError(f"hf_config.{names[0]}", "is required")
    return value


def _flag(cfg: dict[str, Any], name: str) -> bool | None:
    value = cfg.get(name)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"hf_config.{name}", f"must be true or false, got {shown(value)}")
    return value


def _number(cfg: dict[str, Any], *names: str) -> float | None:
    name, value = _value(cfg, names)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(f"hf_config.{name}", f"must be a number, got {shown(value)}")
    return value


def _text(cfg: dict[str, Any], *names: str) -> str | None:
    name, value = _value(cfg, names)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"hf_config.{name}", f"must be a string, got {shown(value)}")
    return value


def _layers(cfg: dict[str, Any], name: str) -> tuple[int, ...]:
    value = cfg.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or any(
            isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise ConfigError(f"hf_config.{name}", f"must be a list of layer indices, got "
                          f"{shown(value)}")
    return tuple(value)


def _set(out: dict[str, Any], name: str, value: Any) -> None:
    if value is not None:
        out[name] = value


def _common(cfg: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hidden_size": _require(cfg, "hidden_size"),
        "num_hidden_layers": _require(cfg, "num_hidden_layers"),
        "num_attention_heads": _require(cfg, "num_attention_heads"),
        "intermediate_size": _require(cfg, "intermediate_size"),
        "vocab_size": _require(cfg, "vocab_size"),
    }
    for name in ("num_key_value_heads", "head_dim", "max_position_embeddings"):
        _set(out, name, _int(cfg, name))
    for name in ("tie_word_embeddings", "attention_bias", "mlp_bias"):
        _set(out, name, _flag(cfg, name))
    for name in ("attention_dropout", "final_logit_softcapping", "attn_logit_softcapping"):
        _set(out, name, _number(cfg, name))
    _set(out, "hidden_act", _text(cfg, "hidden_act", "hidden_activation"))
    return out


def _read_llama(cfg: dict[str, Any]) -> dict[str, Any]:
    return _common(cfg)


def _read_gemma(cfg: dict[str, Any]) -> dict[str, Any]:
    out = _common(cfg)
    out.setdefault("tie_word_embeddings", True)  # GemmaConfig's default
    _set(out, "hidden_act", _text(cfg, "hidden_activation", "hidden_act"))
    return out


def _read_phi3(cfg: dict[str, Any]) -> dict[str, Any]:
    out = _read_windowed(cfg)
    for name in ("resid_pdrop", "embd_pdrop"):
        _set(out, name, _number(cfg, name))
    return out


def _read_windowed(cfg: dict[str, Any]) -> dict[str, Any]:
    """Mistral and Phi-3: a `sliding_window` makes every layer a sliding one (transformers'
    create_sliding_window_causal_mask for the whole model)."""
    out = _common(cfg)
    window = _int(cfg, "sliding_window")
    if window is not None:
        out["sliding_window"] = window
        out["sliding_layers"] = list(range(out["num_hidden_layers"]))
    return out


def _read_gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    h = _require(cfg, "n_embd", "hidden_size")
    tied = _flag(cfg, "tie_word_embeddings")
    return {
        "hidden_size": h,
        "num_hidden_layers": _require(cfg, "n_layer", "num_hidden_layers"),
        "num_attention_heads": _require(cfg, "n_head", "num_attention_heads"),
        "intermediate_size": _int(cfg, "n_inner", default=4 * h),
        "vocab_size": _require(cfg, "vocab_size"),
        "max_position_embeddings": _int(cfg, "n_positions", "n_ctx", default=1024),
        "tie_word_embeddings": True if tied is None else tied,
        "hidden_act": _text(cfg, "activation_function") or "gelu_new",
        "attention_dropout": _default(_number(cfg, "attn_pdrop"), 0.1),
        "resid_pdrop": _default(_number(cfg, "resid_pdrop"), 0.1),
        "embd_pdrop": _default(_number(cfg, "embd_pdrop"), 0.1),
    }


def _default(value: float | None, default: float) -> float:
    return default if value is None else value


def _routed_experts(cfg: dict[str, Any]) -> dict[str, Any]:
    """An unknown model's routed experts, under the names HF configs give them (Mixtral's,
    Qwen-MoE's, DeepSeek's, GPT-OSS's): empty where it has none."""
    experts = _int(cfg, "num_local_experts", "num_experts", "n_routed_experts")
    if not experts:
        return {}
    top_k = _require(cfg, "num_experts_per_tok", "experts_per_token")
    out: dict[str, Any] = {"num_local_experts": experts, "num_experts_per_tok": top_k}
    _set(out, "moe_intermediate_size", _int(cfg, "moe_intermediate_size"))
    return out


def _read_mixtral(cfg: dict[str, Any]) -> dict[str, Any]:
    out = _common(cfg)
    out["num_local_experts"] = _require(cfg, "num_local_experts")
    out["num_experts_per_tok"] = _require(cfg, "num_experts_per_tok")
    return out


def _read_qwen_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    out = _common(cfg)
    out["num_local_experts"] = _require(cfg, "num_experts")
    out["num_experts_per_tok"] = _require(cfg, "num_experts_per_tok")
    out["moe_intermediate_size"] = _require(cfg, "moe_intermediate_size")
    _set(out, "shared_expert_intermediate_size",
         _int(cfg, "shared_expert_intermediate_size") or None)
    out["decoder_sparse_step"] = _int(cfg, "decoder_sparse_step") or 1
    out["mlp_only_layers"] = _layers(cfg, "mlp_only_layers")
    return out


def _read_deepseek_v3(cfg: dict[str, Any]) -> dict[str, Any]:
    out = _common(cfg)
    out["num_local_experts"] = _require(cfg, "n_routed_experts")
    out["num_experts_per_tok"] = _require(cfg, "num_experts_per_tok")
    moe_f = _require(cfg, "moe_intermediate_size")
    out["moe_intermediate_size"] = moe_f
    shared = _int(cfg, "n_shared_experts", default=0)
    if shared is not None and shared < 0:
        raise ConfigError("hf_config.n_shared_experts", f"must not be negative, got {shared}")
    out["shared_expert_intermediate_size"] = moe_f * (shared or 0)
    out["first_k_dense_replace"] = _int(cfg, "first_k_dense_replace") or 0
    out["decoder_sparse_step"] = _int(cfg, "moe_layer_freq") or 1
    for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                 "v_head_dim"):
        _set(out, name, _int(cfg, name))
    out.pop("head_dim", None)  # DeepSeek's head_dim is the rope part; MLA fields describe heads
    return out


def _read_gemma3(cfg: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's layer_types (transformers' default: every sliding_window_pattern-th layer
    global, the others sliding), and the window."""
    out = _read_gemma(cfg)
    pattern = 6
    if cfg.get("layer_types") is None:
        pattern = _int(cfg, "sliding_window_pattern", default=6) or 0
        if pattern < 1:
            raise ConfigError("hf_config.sliding_window_pattern", f"must be at least 1, got "
                              f"{pattern}")
    _sliding(cfg, out, pattern, 4096)  # Gemma3TextConfig's default window
    return out


def _read_gpt_oss(cfg: dict[str, Any]) -> dict[str, Any]:
    """GPT-OSS: routed experts in every layer (none shared), every other layer sliding
    (GptOssConfig's default layer_types) over a window of 128."""
    out = _common(cfg)
    out["num_local_experts"] = _require(cfg, "num_local_experts", "num_experts")
    out["num_experts_per_tok"] = _require(cfg, "num_experts_per_tok", "experts_per_token")
    out.setdefault("attention_bias", True)  # GptOssConfig's default
    _sliding(cfg, out, 2, 128)
    return out


def _sliding(cfg: dict[str, Any], out: dict[str, Any], pattern: int, window: int) -> None:
    """The sliding layers of `cfg`'s layer_types (by default every `pattern`-th layer global,
    the others sliding) and their window (`window` by default) into `out`."""
    layers = out["num_hidden_layers"]
    types = cfg.get("layer_types")
    if types is None:
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                 for i in range(layers)]
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
        raise ConfigError("hf_config.layer_types", f"must list {layers} of {', '.join(kinds)} "
                          f"(one per layer), got {shown(types)}")
    if "sliding_attention" in types:
        out["sliding_window"] = _int(cfg, "sliding_window", default=window)
        out["sliding_layers"] = [i for i, t in enumerate(types) if t == "sliding_attention"]


_READERS = {
    "gemma": _read_gemma,
    "gemma2": _read_gemma,
    "gemma3_text": _read_gemma3,
    "phi3": _read_phi3,
    "mistral": _read_windowed,
    "gpt2": _read_gpt2,
    "mixtral": _read_mixtral,
    "qwen2_moe": _read_qwen_moe,
    "qwen3_moe": _read_qwen_moe,
    "deepseek_v3": _read_deepseek_v3,
    "gpt_oss": _read_gpt_oss,
}
