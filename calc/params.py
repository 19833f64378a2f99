"""Parameter counts, exactly as the Hugging Face implementation instantiates them.

A decoder layer is described as its list of linear projections (`Linear`, with shapes)
plus small vectors (norms, biases). The same description drives everything that depends on
which weights exist: the count, LoRA adapter sizes, tensor-parallel splits, QLoRA quantisation
and the bf16 weight copies autocast makes for each matmul.

Checked against `sum(p.numel() for p in model.parameters())` of the transformers model built on
the meta device (`validation/param_counts.py`); e.g. Llama-3-8B: 8,030,261,248.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from .architecture import Architecture
from .formula import Formula, Term
from .sources import HF_PARAMS, LORA

Group = Literal["attention", "mlp", "experts", "shared_expert", "router"]
TPSplit = Literal["column", "row", "none"]


@dataclass(frozen=True, slots=True)
class Linear:
    """One `nn.Linear` (or `Conv1D`), `copies` times (routed experts)."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    group: Group
    tp: TPSplit  # Megatron split: column splits outputs, row splits inputs
    copies: int = 1

    @property
    def weight_count(self) -> int:
        return self.in_features * self.out_features * self.copies

    @property
    def bias_count(self) -> int:
        return self.out_features * self.copies if self.bias else 0

    def local_shape(self, tp: int) -> tuple[int, int]:
        """(outputs, inputs) of one copy on one GPU: column-parallel splits the outputs,
        row-parallel the inputs (Megatron-LM)."""
        return (self.out_features // (tp if self.tp == "column" else 1),
                self.in_features // (tp if self.tp == "row" else 1))

    def local_counts(self, tp: int, ep: int) -> tuple[int, int]:
        """(weights, biases) on one GPU: tp splits split weights (and column biases; a
        row-parallel bias is added after the reduction, whole), ep divides routed experts."""
        w, b = self.weight_count, self.bias_count
        if self.tp != "none":
            w //= tp
            if self.tp == "column":
                b //= tp
        if self.group == "experts":
            w //= ep
            b //= ep
        return w, b


@dataclass(frozen=True, slots=True)
class LayerParams:
    """The parameters of one decoder layer."""

    linears: tuple[Linear, ...]
    norm_count: int  # norm weights (and LayerNorm biases), q/k norms
    moe: bool
    # Derived once in __post_init__ (the activation model asks for these on every estimate).
    linear_weight_count: int = 0
    bias_count: int = 0
    attention_inputs: tuple[Linear, ...] = ()  # projections reading the attention norm's output
    mlp_inputs: tuple[Linear, ...] = ()  # projections reading the MLP norm's output
    by_name: tuple[tuple[str, Linear], ...] = ()
    widest_row_input: int = 0  # the MLP intermediate (or expert intermediate)

    def __post_init__(self) -> None:
        linears = self.linears
        derived = {
            "linear_weight_count": sum(lin.weight_count for lin in linears),
            "bias_count": sum(lin.bias_count for lin in linears),
            "attention_inputs": tuple(
                lin for lin in linears if lin.group == "attention" and lin.tp != "row"
                and not lin.name.startswith(("q_b", "kv_b"))),
            "mlp_inputs": tuple(
                lin for lin in linears
                if lin.group in ("mlp", "shared_expert", "router") and lin.tp != "row"),
            "by_name": tuple((lin.name, lin) for lin in linears),
            "widest_row_input": max(lin.in_features for lin in linears if lin.tp == "row"),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def group_count(self, *groups: Group) -> int:
        return sum(lin.weight_count + lin.bias_count for lin in self.linears if lin.group in groups)


LAYER_PARAMETERS = Formula(
    "parameters/layer", "lambda W, B_b, n_n: W + B_b + n_n", id="params.layer", unit="parameters",
    title="Parameters of one decoder layer", source=HF_PARAMS,
    note="each nn.Linear's d_in x d_out (times the routed experts), its bias, the norms (and "
    "GPT-OSS's attention sinks, one per head)")
MODEL_PARAMETERS = Formula(
    "parameters/model", "lambda E, H_v, n_f, L_d, P_d, L_m, P_m: E + H_v + n_f + L_d * P_d + "
    "L_m * P_m", id="params.model", unit="parameters", title="Parameters of the model",
    source=HF_PARAMS)
LORA_PARAMETERS = Formula(
    "parameters/trainable", "lambda r_L, L_d, S_d, L_m, S_m: r_L * (L_d * S_d + L_m * S_m)",
    id="params.lora", unit="parameters", title="Trainable parameters: the LoRA adapters",
    source=LORA, note="each adapted linear gains A (r x d_in) and B (d_out x r); a MoE layer's "
    "routed experts gain r (d_in + d_out) each, gate and up fused at rank 2r (S: the layer's "
    "widths, `adapter_shapes`, peft ParamWrapper)")


@dataclass(frozen=True, slots=True, eq=False)  # one per architecture (memoised): hashed by identity
class ParamCounts:
    """Whole-model parameter counts, per decoder layer kind and in total."""

    arch: Architecture
    embedding: int  # token embedding (+ GPT-2's learned positions)
    lm_head: int  # 0 when tied to the embedding
    final_norm: int
    dense_layer: LayerParams
    moe_layer: LayerParams | None
    dense_layers: int
    moe_layers: int
    experts_per_token: int  # top-k routing
    experts: int
    dense_term: Term  # LAYER_PARAMETERS of a dense layer
    moe_term: Term | None
    model: Term  # MODEL_PARAMETERS

    @property
    def total(self) -> int:
        return self.model.bytes

    @property
    def active(self) -> int:
        """Parameters one token passes through (routed experts counted top-k, not all)."""
        if not self.moe_layer:
            return self.total
        routed = self.moe_layer.group_count("experts")
        inactive = routed - routed // self.experts * self.experts_per_token
        return self.total - self.moe_layers * inactive


def lora_targets(targets: str, moe: bool = False) -> frozenset[str]:
    """The projections a LoRA adapter attaches to, by `training.lora_targets` (the names of
    `layer_params`'s linears, tested with `adapted`; `query_value` is peft's default for
    Llama-family models, the fused qkv projection where there is one). `moe`: a MoE model
    whose targets peft converts for transformers v5 (`Traits.peft_moe`): its `all-linear`
    adapts the routed experts and the router by parameter, and the MLP names it maps onto the
    experts no longer reach the dense layers' or the shared experts' linears (PEFT_EXPERTS,
    `_convert_peft_config_moe`). Elsewhere `all-linear` is every nn.Linear: on Qwen2-MoE the
    attention, the shared expert and its gate, not the stacked experts nor the router."""
    if targets == "query_value":
        return frozenset({"q_proj", "v_proj", "qkv_proj"})
    attention = {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "q_a_proj", "q_b_proj",
                 "kv_a_proj_with_mqa", "kv_b_proj"}
    if targets == "attention":
        return frozenset(attention)
    if moe:
        return frozenset(attention | {"experts", "router", "shared_expert_gate"})
    return frozenset(attention | {"gate_proj", "up_proj", "down_proj", "gate_up_proj", "fc_in",
                                  "fc_out", "shared_expert_gate"})


def lora_targets_of(targets: str, arch: Architecture) -> frozenset[str]:
    """`lora_targets` on `arch`: its experts by parameter where peft converts `all-linear`
    for its stacked experts (`Traits.peft_moe`)."""
    return lora_targets(targets, arch.is_moe and arch.traits.peft_moe)


def adapted(lin: Linear, targets: frozenset[str]) -> bool:
    """Whether LoRA adapts `lin` (`targets` from `lora_targets`)."""
    return "experts" in targets if lin.group == "experts" else lin.name in targets


def by_parameter(lin: Linear) -> bool:
    """Whether peft adapts `lin` through its stacked parameter (`ParamWrapper`), not as an
    nn.Linear: transformers v5 keeps the routed experts as 3-D parameters and the router as a
    module of its own, and peft's `all-linear` targets both by parameter (PEFT_EXPERTS). Such
    an adapter has no per-token path: its factors fold into the weight each forward."""
    return lin.group == "experts" or lin.name == "router"


def quantised(lin: Linear) -> bool:
    """Whether bitsandbytes' 4-bit conversion (QLoRA) replaces `lin`: nn.Linear modules only,
    so not the stacked routed experts nor the router (PEFT_EXPERTS)."""
    return not by_parameter(lin)


def stacked(lin: Linear) -> int:
    """How many projections `lin`'s tensor holds: transformers v5 stacks the routed experts'
    gate and up in one (`gate_up_proj`), counted on gate_proj (2) and not on up_proj (0)."""
    if lin.group != "experts":
        return 1
    return {"gate_proj": 2, "up_proj": 0}.get(lin.name, 1)


def adapter_shapes(lin: Linear, rank: int, tp: int = 1, ep: int = 1
                   ) -> tuple[tuple[int, int], ...]:
    """The LoRA matrices peft adds to `lin` on one GPU, (rows, cols) each: A (r x d_in) and
    B (d_out x r), per copy. The routed experts' stacked parameters get one A and one B for
    all local experts (rank r per expert, `ParamWrapper`), and gate and up share one fused
    adapter of rank 2r over their 2 f outputs (peft's v5 conversion), counted on gate_proj."""
    rows, cols = lin.local_shape(tp)
    if lin.group != "experts":
        return ((rank, cols), (rows, rank)) * lin.copies
    k = stacked(lin)
    if not k:
        return ()
    local = lin.copies // ep
    return ((k * rank * local, cols), (k * rows, k * rank * local))


def _norm_size(arch: Architecture) -> int:
    """Parameters of one norm over `hidden_size` (LayerNorm also has a bias)."""
    return arch.hidden_size * (2 if arch.traits.norm == "layer" else 1)


def _attention(arch: Architecture) -> tuple[list[Linear], int]:
    t = arch.traits
    h, a, k, d = arch.hidden_size, arch.num_attention_heads, arch.kv_heads, arch.head_size
    qkv_bias = arch.attention_bias if t.qkv_bias is None else t.qkv_bias
    o_bias = arch.attention_bias if t.o_bias is None else t.o_bias
    if arch.is_mla:
        assert arch.kv_lora_rank and arch.qk_nope_head_dim and arch.qk_rope_head_dim
        assert arch.v_head_dim
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        linears: list[Linear] = []
        norms = arch.kv_lora_rank
        if arch.q_lora_rank:
            linears += [
                Linear("q_a_proj", h, arch.q_lora_rank, qkv_bias, "attention", "none"),
                Linear("q_b_proj", arch.q_lora_rank, a * qk, False, "attention", "column"),
            ]
            norms += arch.q_lora_rank
        else:
            linears.append(Linear("q_proj", h, a * qk, False, "attention", "column"))
        linears += [
            Linear("kv_a_proj_with_mqa", h, arch.kv_lora_rank + arch.qk_rope_head_dim, qkv_bias,
                   "attention", "none"),
            Linear("kv_b_proj", arch.kv_lora_rank, a * (arch.qk_nope_head_dim + arch.v_head_dim),
                   False, "attention", "column"),
            Linear("o_proj", a * arch.v_head_dim, h, o_bias, "attention", "row"),
        ]
        return linears, norms
    if t.fused_qkv:
        linears = [Linear("qkv_proj", h, (a + 2 * k) * d, qkv_bias, "attention", "column")]
    else:
        linears = [
            Linear("q_proj", h, a * d, qkv_bias, "attention", "column"),
            Linear("k_proj", h, k * d, qkv_bias, "attention", "column"),
            Linear("v_proj", h, k * d, qkv_bias, "attention", "column"),
        ]
    linears.append(Linear("o_proj", a * d, h, o_bias, "attention", "row"))
    return linears, (2 * d if t.qk_norm else 0) + (a if t.sinks else 0)


def _mlp(arch: Architecture, f: int, group: Group, copies: int = 1) -> list[Linear]:
    t = arch.traits
    h = arch.hidden_size
    bias = arch.mlp_bias if t.mlp_bias is None else t.mlp_bias
    if t.mlp == "plain":
        return [
            Linear("fc_in", h, f, bias, group, "column", copies),
            Linear("fc_out", f, h, bias, group, "row", copies),
        ]
    if t.fused_gate_up:
        return [
            Linear("gate_up_proj", h, 2 * f, bias, group, "column", copies),
            Linear("down_proj", f, h, bias, group, "row", copies),
        ]
    return [
        Linear("gate_proj", h, f, bias, group, "column", copies),
        Linear("up_proj", h, f, bias, group, "column", copies),
        Linear("down_proj", f, h, bias, group, "row", copies),
    ]


def layer_params(arch: Architecture, moe: bool) -> LayerParams:
    """Parameters of one decoder layer, dense (`moe=False`) or with routed experts."""
    attention, attn_norms = _attention(arch)
    linears = list(attention)
    if moe:
        e = arch.num_local_experts
        linears.append(Linear("router", arch.hidden_size, e, arch.traits.router_bias, "router",
                              "none"))
        linears += _mlp(arch, arch.expert_intermediate_size, "experts", copies=e)
        if arch.shared_expert_intermediate_size:
            linears += _mlp(arch, arch.shared_expert_intermediate_size, "shared_expert")
            if arch.traits.shared_expert_gate:
                linears.append(Linear("shared_expert_gate", arch.hidden_size, 1, False, "router",
                                      "none"))
    else:
        linears += _mlp(arch, arch.intermediate_size, "mlp")
    norms = arch.traits.norms_per_layer * _norm_size(arch) + attn_norms
    return LayerParams(linears=tuple(linears), norm_count=norms, moe=moe)


@lru_cache(maxsize=256)
def count_params(arch: Architecture) -> ParamCounts:
    """Exact parameter counts of `arch` (cached: architectures are frozen and hashable)."""
    h, v = arch.hidden_size, arch.vocab_size
    embedding = v * h
    if arch.traits.learned_positions:
        embedding += arch.max_position_embeddings * h
    moe_layers = arch.moe_layer_count
    dense = layer_params(arch, moe=False)
    moe = layer_params(arch, moe=True) if moe_layers else None
    dense_term, moe_term = _layer_term(dense), (_layer_term(moe) if moe else None)
    # a classification head is its own matrix, never tied to the embedding
    lm_head = arch.num_labels * h if arch.num_labels else 0 if arch.tie_word_embeddings else v * h
    final_norm = _norm_size(arch)
    dense_layers = arch.num_hidden_layers - moe_layers
    model = MODEL_PARAMETERS(embedding, lm_head, final_norm, dense_layers, dense_term.bytes,
                             moe_layers, moe_term.bytes if moe_term else 0)
    return ParamCounts(arch, embedding, lm_head, final_norm, dense, moe, dense_layers, moe_layers,
                       arch.num_experts_per_tok, arch.num_local_experts, dense_term, moe_term,
                       model)


def _layer_term(layer: LayerParams) -> Term:
    return LAYER_PARAMETERS(layer.linear_weight_count, layer.bias_count, layer.norm_count)


def adapter_widths(layer: LayerParams, targets: frozenset[str], tp: int = 1, ep: int = 1) -> int:
    """One layer's LoRA parameters on one GPU over the rank: the sum of (rows + cols) over
    its adapted linears (`adapter_shapes`)."""
    return sum(rows * cols for lin in layer.linears if adapted(lin, targets)
               for rows, cols in adapter_shapes(lin, 1, tp, ep))


@lru_cache(maxsize=256)
def lora_parameters(arch: Architecture, rank: int, targets: frozenset[str]) -> Term:
    """The whole model's LoRA adapter parameters (LORA_PARAMETERS)."""
    c = count_params(arch)
    moe = adapter_widths(c.moe_layer, targets) if c.moe_layer else 0
    return LORA_PARAMETERS(rank, c.dense_layers, adapter_widths(c.dense_layer, targets),
                           c.moe_layers, moe)
