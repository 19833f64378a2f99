r"""Activations of a Megatron-LM layer (`implementation: megatron`).

Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models",
Table 2, per layer in bytes with 16-bit activations:

.. math:: sbh\left(34 + 5\frac{as}{h}\right) \;\text{(no parallelism)},\quad
          sbh\left(10 + \frac{24}{t} + 5\frac{as}{ht}\right) \;\text{(TP)},\quad
          \frac{sbh}{t}\left(34 + 5\frac{as}{h}\right) \;\text{(TP + SP)}

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


NORMS = _f("activations/norms", "lambda T, h: 2 * 2 * T * h", "norms", "The two LayerNorm inputs")
QKV_INPUT = _f("activations/attention", "lambda T, h: 2 * T * h", "qkv_input", "The QKV input")
QKV = _f("activations/attention", "lambda T, a, k, d: 2 * T * (a + 2 * k) * d", "qkv", "Q, K, V")
ATTN_OUT = _f("activations/attention", "lambda T, a, d: 2 * T * a * d", "attention_output",
              "The attention output (the projection's input)")
SCORES = _f("activations/attention_scores",
            "lambda b, a, s, p_d: b * a * s**2 * (2 + 2 * p_d + p_d)", "scores",
            "Softmax output, and with dropout its output and mask")
LSE = _f("activations/attention", "lambda T, a: 4 * T * a", "logsumexp",
         "Flash attention's log-sum-exp, fp32")
FC1_INPUT = _f("activations/mlp", "lambda T, h: 2 * T * h", "fc1_input", "The fc1 input")
MLP_GATED = _f("activations/mlp", "lambda T, f: 3 * 2 * T * f", "mlp_gated",
               "The gated fc1 outputs and the fc2 input")
MLP_PLAIN = _f("activations/mlp", "lambda T, f: 2 * 2 * T * f", "mlp_plain",
               "The fc1 output and the fc2 input")
DROPOUT = _f("activations/dropout", "lambda T, h: 2 * T * h", "dropout",
             "Dropout masks after attention and after the MLP")
FORWARD = _f("temporaries/layer_forward", "lambda: 0", "forward_transient",
             "A layer's forward transient (none in the formula)")
BACKWARD = _f("temporaries/layer_backward", "lambda T, f: 3 * 2 * T * f", "backward_transient",
              "A layer's backward transient: the MLP's gradients")
CHECKPOINT_INPUT = _f("activations/checkpointed_inputs", "lambda T, h: 2 * T * h",
                      "checkpoint_input", "What a checkpointed layer keeps: its input")


def megatron_layer(x: Setup, layer: LayerParams) -> LayerActivations:
    T, h, a, k, d = x.T, x.h, x.a, x.k, x.d
    f = max(lin.in_features for lin in layer.linears
            if lin.tp == "row" and lin.group != "attention") // x.tp
    drop = 1 if x.arch.resid_pdrop or x.arch.attention_dropout else 0
    saved = [NORMS(T, h), QKV_INPUT(T, h), QKV(T, a, k, d), ATTN_OUT(T, a, d)]
    if x.eager and not x.selective_attention:
        saved.append(SCORES(x.b, a, x.s, drop))
    else:
        saved.append(LSE(T, a))
    saved += [FC1_INPUT(T, h), (MLP_GATED if x.arch.traits.mlp == "gated" else MLP_PLAIN)(T, f)]
    if drop:
        saved.append(DROPOUT(T, h))
    return layer_activations(tuple(saved), FORWARD(), BACKWARD(T, f),
                             CHECKPOINT_INPUT(T, h))
