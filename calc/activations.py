"""Activations: the tensors autograd saves for backward, per decoder layer, per op.

Modelled on what Hugging Face transformers' eager PyTorch modules save (the default
`implementation`), op by op, for one micro-batch on one GPU. Symbols (per GPU):

    T  tokens in the micro-batch (b * s / cp)      h  hidden size (h / tp with sequence parallel)
    a, k  query and key/value heads / tp           d  head dim     f  intermediate size / tp
    c  compute width (2 for bf16)                  r  residual-stream width (4 under amp)

Rules that decide the numbers (each checked against traced steps, see validation/):
- An op saves only what its backward needs, and only for inputs that require grad
  (`x * cos` saves `cos`; a frozen linear saves its weight, not its input).
- Llama's RMSNorm upcasts to fp32: it saves its fp32 input (the residual itself under amp, a
  copy otherwise), rsqrt of the variance and the normalised tensor (fp32 under amp, cast back
  otherwise).
- Under autocast every matmul casts its input separately (activation casts are not cached), so
  q, k and v each keep their own low-precision copy of the normed input; weights are cast once
  per forward and the copy is saved for backward (`weight_copies`).
- SDPA's flash/memory-efficient kernels keep q, k, v, the output and the fp32 log-sum-exp;
  the eager path keeps the fp32 softmax and its low-precision cast (a*s per token each).
- Dropout with p > 0 keeps a one-byte mask.

`implementation: megatron` uses Korthikanti et al. (2022), Table 2, generalised to GQA and
gated MLPs (see :func:`_megatron_layer`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .architecture import ACTIVATIONS, Architecture
from .numerics import Numerics
from .params import LayerParams, Linear, lora_targets
from .scenario import Parallelism, Training


@dataclass(frozen=True, slots=True)
class Shape:
    """Per-GPU sizes the activation formulas use (see the module docstring for symbols)."""

    tokens: int  # T
    batch: int
    seq: int  # s / cp, the local sequence
    hidden: int  # h per GPU for h-sized tensors (split by tp under sequence parallelism)
    hidden_full: int  # h (linear inputs are gathered to full h under TP)
    heads: int  # a / tp
    kv_heads: int  # k / tp
    head_dim: int
    tp: int


def shape(arch: Architecture, t: Training, p: Parallelism) -> Shape:
    seq = t.seq_len // p.cp
    h = arch.hidden_size
    return Shape(
        tokens=t.micro_batch_size * seq,
        batch=t.micro_batch_size,
        seq=seq,
        hidden=h // p.tp if p.sequence_parallel else h,
        hidden_full=h,
        heads=arch.num_attention_heads // p.tp,
        kv_heads=max(1, arch.kv_heads // p.tp),
        head_dim=arch.head_size,
        tp=p.tp,
    )


@dataclass(frozen=True, slots=True)
class LayerActivations:
    """Memory of one decoder layer for one micro-batch."""

    saved: dict[str, int]  # saved for backward, by path key ("activations/attention", ...)
    forward_transient: int  # extra bytes alive at the layer's worst forward moment
    backward_transient: int  # gradient buffers alive at the layer's worst backward moment
    checkpoint_input: int  # what the layer keeps when checkpointed: its input
    total: int = 0  # sum of `saved`, derived in __post_init__

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.saved.values()))


class _Saved(dict[str, int]):
    """Bytes by breakdown key; `add("mlp", n)` accumulates under "activations/mlp"."""

    def add(self, key: str, nbytes: float) -> None:
        path = _PATHS.get(key) or _PATHS.setdefault(key, "activations/" + key)
        self[path] = self.get(path, 0) + int(nbytes)


_PATHS: dict[str, str] = {}


def decoder_layer(
    arch: Architecture, layer: LayerParams, n: Numerics, t: Training, p: Parallelism,
    s: Shape, *, trainable_weights: bool,
) -> LayerActivations:
    """Activations of one decoder layer (HF transformers' modules, or Megatron's)."""
    if t.implementation == "megatron":
        return _megatron_layer(arch, layer, t, s)
    saved = _Saved()
    lora = t.finetuning in ("lora", "qlora")
    targets = lora_targets(t.lora_targets) if lora else frozenset()
    T, tp = s.tokens, s.tp
    res = n.residual

    # --- norms before attention and MLP (and Gemma 2's post-norms) ---------------------------
    z_width = _norm(arch, n, saved, T * s.hidden, T, trainable_weights)
    z2_width = _norm(arch, n, saved, T * s.hidden, T, trainable_weights)
    if arch.traits.norms_per_layer == 4:  # post-attention / post-feedforward norms on outputs
        for _ in range(2):
            _norm_of_output(arch, n, saved, T * s.hidden, T)

    linears = dict(layer.by_name)
    attention_in, mlp_in = layer.attention_inputs, layer.mlp_inputs

    # --- inputs of the projections reading the normed hidden states --------------------------
    drop = t.lora_dropout if lora else 0.0
    _linear_inputs(n, saved, "attention", attention_in, T * s.hidden_full, z_width, targets,
                   trainable_weights, drop)
    if not layer.moe:
        _linear_inputs(n, saved, "mlp", mlp_in, T * s.hidden_full, z2_width, targets,
                       trainable_weights, drop)

    # --- attention core ----------------------------------------------------------------------
    c = n.compute
    a, k, d = s.heads, s.kv_heads, s.head_dim
    if arch.is_mla:
        _mla(arch, n, saved, s)
    elif arch.traits.qk_norm:
        for heads in (a, k):
            # per-head RMSNorm of the (low-precision) projection output: fp32 copy of its
            # input, rsqrt, and (when its weight trains) the normalised tensor cast back
            width = 4 + (c if trainable_weights else 0)
            saved.add("attention", T * heads * d * width + T * heads * 4)
    q_width = c  # SDPA (lower-precision op under autocast) sees low-precision q, k, v
    ad = a * d
    rotary = arch.traits.rotary
    if t.attention == "flash" or t.activation_checkpointing == "selective":
        saved.add("attention", T * (a + 2 * k) * d * q_width)  # q, k, v kept by the kernel
        if arch.traits.fused_qkv and rotary != "none":
            # v is a view of the fused projection's output, so all of it stays alive beside
            # the rotated q and k
            saved.add("attention", T * (a + k) * d * c)
        saved.add("attention", T * ad * c)  # output, shared with o_proj's input
        saved.add("attention", T * a * 4)  # log-sum-exp, fp32
        if rotary == "cat" and trainable_weights:
            # rotary by torch.cat leaves q laid out (b, a, s, d): the kernel's output follows,
            # and transpose(1, 2).contiguous() copies it for o_proj
            saved.add("attention", T * ad * c)
    else:
        rep = 1 if k == a else 2  # repeat_kv materialises expanded k and v when GQA
        saved.add("attention", T * (ad + (ad if rep == 2 else k * d) * 2) * c)
        if trainable_weights:
            saved.add("attention", T * ad * c)  # attention output transposed for o_proj
        probs = s.batch * a * s.seq * s.seq
        saved.add("attention_scores", probs * (4 + c))  # fp32 softmax + its cast
        if arch.attn_logit_softcapping:
            saved.add("attention_scores", probs * c)  # Gemma 2: tanh(scores / cap) keeps its output
        if arch.attention_dropout:
            saved.add("dropout", probs)
    o_proj = linears.get("o_proj")
    if o_proj is not None and o_proj.name in targets:
        _lora_adapter_input(n, saved, "attention", T * ad, drop)

    # --- MLP ---------------------------------------------------------------------------------
    if layer.moe:
        _moe(arch, layer, n, saved, s, z2_width, targets, trainable_weights)
    else:
        mlp = [lin for lin in layer.linears if lin.group == "mlp"]
        f = mlp[-1].in_features // tp
        # the down projection's input is kept by the projection (full training), by its
        # LoRA adapter (its own copy in pure mode), or by nobody (no adapter on it)
        kept = "full" if trainable_weights else ("adapter" if mlp[-1].name in targets else "none")
        _mlp_core(arch, n, saved, "mlp", T, f, down_input=kept == "full")
        if kept == "adapter":
            _lora_adapter_input(n, saved, "mlp", T * f, drop)

    # --- residual dropout --------------------------------------------------------------------
    if arch.resid_pdrop:
        saved.add("dropout", 2 * T * s.hidden)  # bool masks after attention and after MLP

    # --- LoRA: lora_A's output kept by lora_B (adapter dtype fp32, or autocast's cast) -------
    if targets:
        adapters = [lin for lin in layer.linears if lin.name in targets]
        r_width = c if n.autocast else 4
        saved.add("lora", T * t.lora_rank * len(adapters) * r_width)
        if n.autocast:  # cached low-precision copies of the trainable adapter weights
            saved.add("weight_copies", c * sum(
                t.lora_rank * sum(lin.local_shape(tp)) for lin in adapters))

    # --- weight copies autocast makes and autograd keeps ---------------------------------------
    if n.autocast and t.finetuning != "qlora":
        saved.add("weight_copies", c * sum(lin.local_counts(p.tp, p.ep)[0]
                                           for lin in layer.linears))

    # --- transients --------------------------------------------------------------------------
    f_local = layer.widest_row_input // tp
    grad_h = T * s.hidden * max(res, c)
    backward_transient = 3 * T * f_local * c + 2 * grad_h
    forward_transient = T * s.hidden_full * 4 + T * s.hidden * res
    if t.attention == "eager" and t.activation_checkpointing != "selective":
        probs = s.batch * a * s.seq * s.seq
        # forward, at the softmax: its input (scores plus the mask, in the mask's dtype) and
        # its fp32 output coexist; afterwards the output and its cast stay saved
        forward_transient = max(forward_transient, probs * max(0, mask_width(n) - c))
        # backward, at the softmax's backward: the low-precision copy of the probabilities is
        # already released, the fp32 gradient of the output and of the input are alive
        # (traced: llama-3.1-8b-4L_b1_s8192_amp_eager)
        backward_transient = max(backward_transient, probs * (8 - c))
    return LayerActivations(
        saved=dict(saved),
        forward_transient=forward_transient,
        backward_transient=backward_transient,
        checkpoint_input=T * s.hidden * res,
    )


def mask_width(n: Numerics) -> int:
    """HF builds the additive 4-D mask in the embeddings' dtype: fp32 under autocast."""
    return n.residual


def eager_mask(t: Training, n: Numerics, s: Shape) -> int:
    """The (b, 1, s, s) additive causal mask of the eager path, alive for the whole forward."""
    if t.attention != "eager" or t.implementation != "hf":
        return 0
    return s.batch * s.seq * s.seq * mask_width(n)


def _norm(arch: Architecture, n: Numerics, saved: _Saved, elems: int, tokens: int,
          trainable: bool = True) -> int:
    """Save what one pre-norm keeps; return the width of its output. A frozen norm weight
    (LoRA) needs no normalised tensor: `weight * y` keeps `y` only for the weight's gradient."""
    res = n.residual
    kind = arch.traits.norm_upcast
    if kind == "native":  # nn.LayerNorm; autocast runs it in fp32
        saved.add("residual", elems * res)  # its input is the residual itself
        saved.add("norms", tokens * 8)  # mean and rstd, fp32
        return 4 if n.autocast else res
    # RMSNorm with an fp32 upcast (Llama-style and Gemma-style).
    if res == 4:
        saved.add("residual", elems * 4)  # the fp32 residual is the upcast input
    else:
        saved.add("norms", elems * 4)  # fp32 copy of the low-precision residual
    saved.add("norms", tokens * 4)  # rsqrt(variance)
    if not trainable:
        pass
    elif kind == "gemma" or res == 4:
        saved.add("norms", elems * 4)  # normalised tensor, fp32, kept by the weight multiply
    else:
        saved.add("norms", elems * res)  # normalised tensor cast back, kept by the multiply
    return res if kind == "gemma" else (4 if res == 4 else n.compute)


def _norm_of_output(arch: Architecture, n: Numerics, saved: _Saved, elems: int,
                    tokens: int) -> None:
    """Gemma 2/3 post-norms read a sublayer output (low precision), not the residual."""
    saved.add("norms", elems * 4 + tokens * 4 + elems * 4)  # fp32 copy, rsqrt, normalised


def _linear_inputs(
    n: Numerics, saved: _Saved, key: str, consumers: tuple[Linear, ...], elems: int, z_width: int,
    targets: frozenset[str], trainable: bool, dropout: float = 0.0,
) -> None:
    """Inputs of the projections that read one normed tensor."""
    if not consumers:
        return
    cast = n.autocast and z_width != n.compute
    readers = [lin for lin in consumers if trainable or lin.name in targets]
    if trainable:
        if cast:
            saved.add(key, len(readers) * elems * n.linear_input)  # one cast per matmul
        else:
            saved.add(key, elems * (n.linear_input if n.linear_input < z_width else z_width))
    for lin in consumers:
        if lin.name in targets:
            _lora_adapter_input(n, saved, key, elems, dropout)


def _lora_adapter_input(n: Numerics, saved: _Saved, key: str, elems: int,
                        dropout: float = 0.0) -> None:
    """What one LoRA adapter keeps of its input: always its own copy. peft casts x to the
    adapter dtype (fp32, `autocast_adapter_dtype`), so lora_A keeps that fp32 copy; under
    autocast lora_A casts it back down and keeps the low-precision cast instead (traced: on
    o_proj this copy sits beside SDPA's saved output). Only in pure fp32 is x itself kept."""
    saved.add(key, elems * (n.compute if n.autocast else 4))
    if dropout:
        saved.add("dropout", elems)  # lora_dropout keeps a one-byte mask of the input




def _mlp_core(arch: Architecture, n: Numerics, saved: _Saved, key: str, tokens: int,
              f: int, down_input: bool = True) -> None:
    c = n.compute
    act = ACTIVATIONS[arch.hidden_act]
    if arch.traits.mlp == "gated":
        # gate output (kept by the activation), activation output and up output (kept by
        # the product), the product (kept by down_proj when it has a weight gradient)
        saved.add(key, (4 if down_input else 3) * tokens * f * c)
    elif act == "native":
        saved.add(key, 2 * tokens * f * c)  # fc output (kept by GELU), GELU output
    elif n.autocast:
        # GPT-2's gelu_new in Python ops: pow runs in fp32 under autocast
        saved.add(key, tokens * f * (4 + 4 + c + 4 + c))
    else:
        saved.add(key, tokens * f * 5 * c)


def _moe(arch: Architecture, layer: LayerParams, n: Numerics, saved: _Saved, s: Shape,
         z_width: int, targets: frozenset[str], trainable: bool) -> None:
    """Routed experts: each token visits top-k experts (Mixtral-style dispatch)."""
    c, T = n.compute, s.tokens
    e = arch.num_local_experts
    saved.add("mlp", T * s.hidden_full * (n.linear_input if n.autocast else z_width))  # router in
    saved.add("mlp", T * e * 4)  # softmax of router logits, fp32
    routed = T * arch.num_experts_per_tok
    f = arch.expert_intermediate_size // s.tp
    saved.add("mlp", routed * s.hidden_full * c * 2)  # gathered expert inputs, expert outputs
    _mlp_core(arch, n, saved, "mlp", routed, f)
    if arch.shared_expert_intermediate_size:
        shared = tuple(lin for lin in layer.linears
                       if lin.group == "shared_expert" and lin.tp != "row")
        _linear_inputs(n, saved, "mlp", shared, T * s.hidden_full, z_width, targets, trainable)
        _mlp_core(arch, n, saved, "mlp", T, arch.shared_expert_intermediate_size // s.tp)


def _mla(arch: Architecture, n: Numerics, saved: _Saved, s: Shape) -> None:
    """DeepSeek's multi-head latent attention: the low-rank paths add their own inputs."""
    T, c = s.tokens, n.compute
    assert arch.kv_lora_rank and arch.qk_nope_head_dim and arch.qk_rope_head_dim
    for rank in (arch.q_lora_rank, arch.kv_lora_rank):
        if rank:
            saved.add("attention", T * rank * (4 + 4 + c))  # latent norm (fp32) + b_proj input
    # q, k, v of the heads differ in width from head_dim: account for them here
    qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
    v = arch.v_head_dim or arch.qk_nope_head_dim
    saved.add("attention", T * s.heads * (2 * qk + v - 3 * s.head_dim) * c)


def _megatron_layer(arch: Architecture, layer: LayerParams, t: Training,
                    s: Shape) -> LayerActivations:
    """Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer
    Models", Table 2, per layer in bytes with 16-bit activations:

    .. math:: sbh\\left(34 + 5\\frac{as}{h}\\right) \\;\\text{(no parallelism)},\\quad
              sbh\\left(10 + \\frac{24}{t} + 5\\frac{as}{ht}\\right) \\;\\text{(TP)},\\quad
              \\frac{sbh}{t}\\left(34 + 5\\frac{as}{h}\\right) \\;\\text{(TP + SP)}

    generalised: the 24 sbh of attention and MLP internals are rebuilt from q/k/v widths and the
    MLP intermediate (8 sbh for Q/K/V with MHA, 16 sbh for a 4h GeLU MLP), flash attention drops
    the 5as/h score terms (keeping the fp32 log-sum-exp), and masks exist only with dropout.
    """
    T, tp = s.tokens, s.tp
    hs = s.hidden  # h-sized tensors split by tp only with sequence parallelism
    a, k, d = s.heads, s.kv_heads, s.head_dim
    f = max(lin.in_features for lin in layer.linears if lin.tp == "row" and lin.group != "attention")
    f //= tp
    gated = arch.traits.mlp == "gated"
    drop = 1 if arch.resid_pdrop or arch.attention_dropout else 0
    saved = _Saved()
    saved.add("norms", 2 * 2 * T * hs)  # two LayerNorm inputs
    saved.add("attention", 2 * T * hs)  # QKV input
    saved.add("attention", 2 * T * (a + 2 * k) * d)  # Q, K, V
    saved.add("attention", 2 * T * a * d)  # attention output = projection input
    if t.attention == "eager" and t.activation_checkpointing != "selective":
        probs = s.batch * a * s.seq * s.seq
        saved.add("attention_scores", probs * (2 + 2 * drop + drop))  # softmax, dropout out, mask
    else:
        saved.add("attention", 4 * T * a)  # log-sum-exp
    saved.add("mlp", 2 * T * hs)  # fc1 input
    saved.add("mlp", (3 * 2 * T * f) if gated else (2 * 2 * T * f))  # fc1 out(s), fc2 input
    saved.add("dropout", drop * 2 * T * hs)
    return LayerActivations(
        saved=dict(saved), forward_transient=0, backward_transient=3 * 2 * T * f,
        checkpoint_input=2 * T * hs,
    )


def head_activations(arch: Architecture, n: Numerics, t: Training, p: Parallelism,
                     s: Shape) -> dict[str, int]:
    """The final norm and the lm_head's saved input (and its autocast weight copy)."""
    norm = _Saved()
    z_width = _norm(arch, n, norm, s.tokens * s.hidden, s.tokens, t.finetuning == "full")
    saved = _Saved({"activations/head": sum(norm.values())})
    if t.loss == "chunked":
        return dict(saved)  # the fused kernel keeps gradients instead (see logits.py)
    if t.finetuning == "full":
        width = n.linear_input if n.autocast else min(z_width, n.linear_input)
        saved.add("head", s.tokens * s.hidden_full * width)
    if n.autocast and t.implementation == "hf":
        saved.add("weight_copies", -(-arch.vocab_size // p.tp) * arch.hidden_size * n.compute)
    return dict(saved)


def embedding_activations(arch: Architecture, s: Shape) -> dict[str, int]:
    """Embedding dropout keeps a one-byte mask (GPT-2's embd_pdrop)."""
    return {"activations/dropout": s.tokens * s.hidden} if arch.embd_pdrop else {}
