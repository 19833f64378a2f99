r"""Activations of a Megatron-LM layer (`implementation: megatron`).

Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models",
Table 2, per layer in bytes with 16-bit activations:

\[
sbh\left(34 + 5\frac{as}{h}\right) \;\text{(no parallelism)},\quad
sbh\left(10 + \frac{24}{t} + 5\frac{as}{ht}\right) \;\text{(TP)},\quad
\frac{sbh}{t}\left(34 + 5\frac{as}{h}\right) \;\text{(TP + SP)}
\]

generalised: the 24 sbh of attention and MLP internals are rebuilt from q/k/v widths and the
MLP intermediate (8 sbh for Q/K/V with MHA, 16 sbh for a 4h GeLU MLP), flash attention drops
the 5as/h score terms (keeping the fp32 log-sum-exp), and masks exist only with dropout. h is
the hidden size per GPU (h / t with sequence parallelism), a and k the heads per GPU.
"""

from __future__ import annotations

from .activations import LayerActivations, layer_activations
from .formula import Formula
from .params import LayerParams
from .setup import Setup
from .sources import KORTHIKANTI


def _f(key: str, expr: str, id: str, title: str) -> Formula:
    return Formula(key, expr, id=f"megatron.{id}", title=title, source=KORTHIKANTI)


NORMS = _f("activations/norms", "lambda T, h, c: 2 * T * h * c", "norms",
           "The two norms' inputs")
QKV_INPUT = _f("activations/attention", "lambda T, h, q: T * h * q", "qkv_input",
               "The QKV input")
QKV = _f("activations/attention", "lambda T, a, k, d, c: T * (a + 2 * k) * d * c", "qkv",
         "Q, K, V")
MLA_QKV = _f("activations/attention", "lambda T, a, d_qk, d_v, c: T * a * (2 * d_qk + d_v) * c",
             "mla_qkv", "MLA: Q and K (nope + rope) and V, up-projected from their latents")
MLA_LATENT = _f("activations/attention", "lambda T, r_q, c, q: T * r_q * (c + q)", "mla_latent",
                "MLA: a latent's norm input and its up-projection's input")
ATTN_OUT = _f("activations/attention", "lambda T, a, d, q: T * a * d * q", "attention_output",
              "The attention output (the projection's input)")
SCORES = _f("activations/attention_scores",
            "lambda b, a, s, p_d, c: b * a * s**2 * (c + c * p_d + p_d)", "scores",
            "Softmax output, and with dropout its output and mask")
LSE = _f("activations/attention", "lambda T, a: 4 * T * a", "logsumexp",
         "Flash attention's log-sum-exp, fp32")
FC1_INPUT = _f("activations/mlp", "lambda T, h, q: T * h * q", "fc1_input",
               "The fc1 input (the router's and the shared expert's too)")
MLP_GATED = _f("activations/mlp", "lambda t_m, f, c, q: t_m * f * (2 * c + q)", "mlp_gated",
               "The gated fc1 outputs and the fc2 input")
MLP_PLAIN = _f("activations/mlp", "lambda t_m, f, c, q: t_m * f * (c + q)", "mlp_plain",
               "The fc1 output and the fc2 input")
ROUTER = _f("activations/mlp", "lambda T, e: T * e * 4", "router",
            "MoE: the router's fp32 probabilities")
PERMUTED = _f("activations/mlp", "lambda t_m, H, c, q: t_m * H * (q + c)", "permuted",
              "MoE: the tokens permuted to their experts (fc1's input) and the experts' outputs "
              "kept to weight them by their probabilities")
DROPOUT = _f("activations/dropout", "lambda T, h: 2 * T * h", "dropout",
             "Dropout masks after attention and after the MLP")
FORWARD = _f("temporaries/layer_forward", "lambda: 0", "forward_transient",
             "A layer's forward transient (none in the formula)")
BACKWARD = _f("temporaries/layer_backward", "lambda t_m, f, c: 3 * t_m * f * c",
              "backward_transient", "A layer's backward transient: the MLP's gradients")
CHECKPOINT_INPUT = _f("activations/checkpointed_inputs", "lambda T, h, c: T * h * c",
                      "checkpoint_input", "What a checkpointed layer keeps: its input")


def megatron_layer(x: Setup, layer: LayerParams) -> LayerActivations:
    """One layer's activations: Korthikanti's terms with the model's own widths. Bytes: c for
    what kernels produce, q for the matmul inputs saved for backward (1 under fp8: Transformer
    Engine saves fp8 copies). MoE layers: the router's probabilities, the tokens permuted to
    their experts (T K times the load factor on one GPU: `Setup.routed`) and the shared
    expert's MLP over all T."""
    T, h, a, k, d = x.T, x.h, x.a, x.k, x.d
    c, q = x.n.compute, x.n.linear_input
    arch = x.arch
    drop = 1 if arch.resid_pdrop or arch.attention_dropout else 0
    saved = [NORMS(T, h, c), QKV_INPUT(T, h, q)]
    if arch.is_mla:
        assert arch.kv_lora_rank and arch.qk_nope_head_dim and arch.qk_rope_head_dim
        d_qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        d = arch.v_head_dim or arch.qk_nope_head_dim
        saved += [MLA_LATENT(T, rank, c, q) for rank in (arch.q_lora_rank, arch.kv_lora_rank)
                  if rank]
        saved.append(MLA_QKV(T, a, d_qk, d, c))
    else:
        saved.append(QKV(T, a, k, d, c))
    saved.append(ATTN_OUT(T, a, d, q))
    if x.eager and not x.selective_attention:
        saved.append(SCORES(x.b, a, x.s, drop, c))
    else:
        saved.append(LSE(T, a))
    saved.append(FC1_INPUT(T, h, q))
    mlp = MLP_GATED if arch.traits.mlp == "gated" else MLP_PLAIN
    if layer.moe:
        f = arch.expert_intermediate_size // x.tp
        saved += [ROUTER(T, arch.num_local_experts), PERMUTED(x.routed, x.H, c, q),
                  mlp(x.routed, f, c, q)]
        widest = (x.routed, f)
        if arch.shared_expert_intermediate_size:
            shared = arch.shared_expert_intermediate_size // x.tp
            saved.append(mlp(T, shared, c, q))
    else:
        f = max(lin.in_features for lin in layer.linears
                if lin.tp == "row" and lin.group != "attention") // x.tp
        saved.append(mlp(T, f, c, q))
        widest = (T, f)
    if drop:
        saved.append(DROPOUT(T, h))
    return layer_activations(tuple(saved), FORWARD(), BACKWARD(*widest, c),
                             CHECKPOINT_INPUT(T, h, c))
