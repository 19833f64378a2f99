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

`implementation: megatron` uses Korthikanti et al. (2022), Table 2 (calc/megatron.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from .architecture import ACTIVATIONS
from .formula import Formula, Term
from .params import LayerParams, Linear, adapted, adapter_shapes, by_parameter
from .setup import Setup
from .sources import PEFT_EXPERTS, QLORA, TORCH_SAC, TORCH_SCHEDULES, TORCH_SDPA
from .sources import TRACED_ACTIVATIONS as SRC


def _f(key: str, expr: str, id: str, title: str) -> Formula:
    return Formula(f"activations/{key}", expr, id=f"act.{id}", title=title, source=SRC)


# --- norms ----------------------------------------------------------------------------------
NORM_INPUT = _f("residual", "lambda T, h, r: T * h * r", "norm_input",
                "A norm's input: the residual itself (LayerNorm; RMSNorm under amp, fp32)")
NORM_STATS = _f("norms", "lambda T: 8 * T", "norm_stats", "LayerNorm's mean and rstd, fp32")
NORM_FP32_COPY = _f("norms", "lambda T, h: T * h * 4", "norm_fp32_copy",
                    "RMSNorm's fp32 copy of a low-precision residual")
NORM_RSQRT = _f("norms", "lambda T: T * 4", "norm_rsqrt", "RMSNorm's rsqrt(variance), fp32")
NORM_OUT_FP32 = _f("norms", "lambda T, h: T * h * 4", "norm_normalised_fp32",
                   "The normalised tensor in fp32, kept by the weight multiply")
NORM_OUT = _f("norms", "lambda T, h, r: T * h * r", "norm_normalised",
              "The normalised tensor cast back, kept by the weight multiply")
POST_NORM = _f("norms", "lambda T, h, n_p: T * h * 4 * n_p + T * 4", "post_norm",
               "A post-norm on a sublayer's output: fp32 copy, rsqrt, and the normalised "
               "tensor where its weight trains (n_p = 2, else 1) (Gemma 2/3)")
# --- the projections' inputs ----------------------------------------------------------------
INPUT_CASTS = _f("attention", "lambda n_r, T, H, q: n_r * T * H * q", "input_casts",
                 "Under autocast each of the n_r projections keeps its own cast of the input")
INPUT = _f("attention", "lambda T, H, q, z: T * H * min(q, z)", "input",
           "The projections' shared input (the normed tensor)")
ADAPTER_INPUT = _f("attention", "lambda T, d_i, q_a: T * d_i * q_a", "adapter_input",
                   "A LoRA adapter's input: its own copy (fp32, or autocast's cast of it), or "
                   "the input itself when it has the adapter's dtype")
ADAPTER_DROPOUT = _f("dropout", "lambda T, d_i: T * d_i", "adapter_dropout",
                     "lora_dropout's one-byte mask of the input")
# --- attention --------------------------------------------------------------------------------
MLA_LATENT = _f("attention", "lambda T, r_q, c: T * r_q * (4 + 4 + c)", "mla_latent",
                "MLA: a latent's norm (fp32) and the b-projection's input")
MLA_LATENT_FROZEN = _f("attention", "lambda T, r_q: T * r_q * 4", "mla_latent_frozen",
                       "MLA with a frozen base (LoRA): a latent's norm keeps its fp32 input")
MLA_WIDTHS = _f("attention", "lambda T, a, d_qk, d_kv, d, c: T * a * (2 * d_qk + d_kv - 3 * d) * c",
                "mla_widths", "MLA: q, k and v beyond head_dim; v is a view of kv_b's output, "
                "which it keeps whole (k's nope part with it)")
QK_NORM = _f("attention", "lambda T, a_h, d, c_n: T * a_h * d * (4 + c_n) + T * a_h * 4",
             "qk_norm", "Per-head RMSNorm of q or k: fp32 input, rsqrt, the normalised tensor")
QKV = _f("attention", "lambda T, a, k, d, c: T * (a + 2 * k) * d * c", "qkv",
         "q, k, v kept by the attention kernel")
FUSED_QKV_OUT = _f("attention", "lambda T, a, k, d, c: T * (a + k) * d * c", "fused_qkv_output",
                   "The fused projection's output, alive beside the rotated q and k (v is a view)")
ATTN_OUT = _f("attention", "lambda T, a, d, c: T * a * d * c", "attention_output",
              "The attention output, shared with o_proj's input")
LSE = _f("attention", "lambda T, a: T * a * 4", "logsumexp", "The kernel's log-sum-exp, fp32")
TRANSPOSED_OUT = _f("attention", "lambda T, a, d, c: T * a * d * c", "transposed_output",
                    "The output copied by transpose().contiguous() for o_proj, beside the "
                    "kernel's: rotary by torch.cat (contiguous heads), or context "
                    "parallelism's ring attention (its merged output in the kernel's layout)")
EAGER_QKV = _f("attention", "lambda T, a, d, c: 3 * T * a * d * c", "eager_qkv",
               "Eager attention: q, and k and v expanded to a heads by repeat_kv")
EAGER_OUT = _f("attention", "lambda T, a, d, c: T * a * d * c", "eager_output",
               "Eager attention: the output transposed for o_proj")
SOFTMAX = _f("attention_scores", "lambda b, a, s, c_s, c_p: b * a * s**2 * (c_s + c_p)",
             "softmax", "Eager attention: the softmax's output (fp32 where the model or "
             "autocast upcasts it) and the probabilities the values are multiplied by, its "
             "cast or the attention dropout's output (none where the softmax output is it)")
MATH_QKV = _f("attention", "lambda T, a, d: 3 * T * a * d * 4", "math_qkv",
              "SDPA's math kernel, in fp32 (it upcasts 16-bit inputs): q scaled, and k (scaled) "
              "and v repeated to every query head")
MATH_PROBS = _f("attention_scores", "lambda b, a, s: b * a * s**2 * 4", "math_probabilities",
                "SDPA's math kernel: the fp32 softmax output, kept by softmax and by the matmul "
                "with v")
SINK_SOFTMAX = _f("attention_scores", "lambda b, a, s, m, c_p: b * a * s * ((s + 1) * m + s * c_p + 8)",
                  "sink_softmax", "Eager attention with sinks (GPT-OSS): the softmax over the "
                  "scores and the sink column, in the mask's dtype; its cast to the values' "
                  "dtype where that differs; max's indices (int64)")
SOFTCAP = _f("attention_scores", "lambda b, a, s, c: b * a * s**2 * c", "softcap",
             "Gemma 2: tanh(scores / cap) keeps its output")
SCORES_DROPOUT = _f("dropout", "lambda b, a, s: b * a * s**2", "attention_dropout",
                    "Attention dropout's one-byte mask")
# --- MLP --------------------------------------------------------------------------------------
MLP_GATED = _f("mlp", "lambda n_g, t_m, f, c: n_g * t_m * f * c", "mlp_gated",
               "Gated MLP: gate out, activation out, up out (and their product for down_proj)")
MLP_NATIVE = _f("mlp", "lambda t_m, f, c, n_d: (1 + n_d) * t_m * f * c", "mlp_plain",
                "Plain MLP: fc output (kept by the activation), and the activation output "
                "where the down projection's weight trains (n_d = 1, else 0)")
MLP_GELU_AMP = _f("mlp", "lambda t_m, f, c, n_d: t_m * f * (4 + 4 + c + 4 + n_d * c)",
                  "mlp_gelu_new_amp", "GPT-2's gelu_new in Python ops, pow in fp32 under "
                  "autocast; the down projection's cast of its output where that projection "
                  "trains (n_d = 1)")
MLP_GELU = _f("mlp", "lambda t_m, f, c, n_d: t_m * f * (4 + n_d) * c", "mlp_gelu_new",
              "GPT-2's gelu_new in Python ops; its output kept where the down projection "
              "trains (n_d = 1)")
ROUTER_INPUT = _f("mlp", "lambda T, H, q: T * H * q", "router_input", "The router's input")
SHARED_GATE = _f("mlp", "lambda T, H, c: T * H * c + T * c", "shared_expert_gate",
                 "Qwen2-MoE's gated shared expert, sigmoid(g(x)) times its output: that output "
                 "and the sigmoid, kept by the product (the sigmoid's own backward reads the "
                 "same tensor)")
ROUTER_SOFTMAX = _f("mlp", "lambda T, e: T * e * 4", "router_softmax",
                    "The softmax of the router logits, fp32")
ROUTER_TOP_K = _f("mlp", "lambda T, K, c: T * K * (8 + c)", "router_top_k",
                  "A router that softmaxes its top-k logits (GPT-OSS): topk's indices (int64) "
                  "and the softmax output")
CLAMPED_GLU = _f("mlp", "lambda n_z, t_m, f, c: n_z * t_m * f * c", "clamped_glu",
                 "GPT-OSS's clamped SwiGLU experts, (up + 1) * gate * sigmoid(alpha gate) with "
                 "gate and up clamped: the fused gate-up output (two wide, kept by the clamps), "
                 "the clamped gate, the sigmoid, their product, up + 1, and the product "
                 "down_proj reads where its weight trains")
EXPERT_IO = _f("mlp", "lambda t_m, H, c, n_e: t_m * H * c * n_e", "expert_io",
               "Routed experts: the outputs of K experts per token, and their gathered inputs "
               "when the experts' weights train (n_e = 2, else 1)")
EXPERT_WEIGHTS = Formula(
    "activations/lora", "lambda W_e, w: W_e * w", id="act.lora_expert_weights",
    source=PEFT_EXPERTS,
    title="LoRA on routed experts (peft's ParamWrapper): each stacked expert weight plus its "
          "adapter, W + s B A, made whole each forward in the weight's dtype and kept by the "
          "grouped GEMM for the input's gradient")
EXPERT_WEIGHT_GRAD = Formula(
    "temporaries/layer_backward", "lambda X_l, W_d, w: X_l + W_d * w",
    id="act.lora_expert_weight_grad", source=PEFT_EXPERTS,
    title="A LoRA'd MoE layer's widest backward moment: the layer's usual one and the "
          "gradient of the folded down-projection weights, whole, before the fold's backward "
          "reduces it to the adapter's",
    note="traced: the down projection's grouped GEMM backward is the step's peak in the "
         "Mixtral and DeepSeek-V3 LoRA cases")
EXPERTS_COMBINE_FORWARD = Formula(
    "temporaries/layer_forward",
    "lambda t_m, H, w_c, n_i, x_e, T, h, r: t_m * H * (2 * w_c + n_i * x_e) + T * h * r",
    id="act.experts_combine_forward", source=SRC,
    title="A MoE layer's widest forward moment, its combine: the experts' outputs times their "
          "routing weights, and those gathered back to token order, in the routing weights' "
          "width (w_c), beside the experts' saved outputs and the residual; where the "
          "experts are frozen (n_i = 1), their gathered inputs too (in the experts' width, "
          "x_e), which nothing saves but the forward still holds",
    note="traced: DeepSeek-V3's width with LoRA under FSDP2 (the forward's peak, -2.4% with "
         "the H-wide fp32 temporary counted there instead)")
CHECKPOINTED_MOE = Formula(
    "temporaries/layer_forward",
    "lambda t_m, H, w_c, x_e, T, h, z, r: t_m * H * (2 * w_c + 2 * x_e) + T * h * (z + r)",
    id="act.checkpointed_moe", source=SRC,
    title="A checkpointed MoE layer's forward, which saves nothing: at its combine the "
          "experts' outputs times their routing weights and those gathered back to token "
          "order (w_c wide), beside the experts' gathered inputs and their outputs (x_e wide), "
          "which nothing keeps but the forward still holds, the MLP's input (z wide, the "
          "shared experts read it after) and the residual",
    note="tp = ep = 1; under per-op selective checkpointing beside the outputs the policy kept. "
         "Traced: DeepSeek-V3's width, QLoRA on the attention under FSDP2, per-op selective "
         "(+7.5% counted as its transient beside every activation it would save, found by "
         "random runs)")
CHECKPOINTED_MOE_FOLDED = Formula(
    "temporaries/layer_forward",
    "lambda t_m, H, w_c, x_e, T, h, z, r, W_e, w: "
    "t_m * H * (2 * w_c + 2 * x_e) + T * h * (z + r) + W_e * w",
    id="act.checkpointed_moe_folded", source=SRC,
    title="A checkpointed MoE layer's forward with LoRA on its routed experts (peft's "
          "ParamWrapper): `act.checkpointed_moe` beside the folded weights, W + s B A, which the "
          "experts' forward builds and holds to its end though nothing saves them",
    note="tp = ep = 1. Traced: a Qwen3-MoE width, QLoRA on every linear, fp16 autocast under "
         "FSDP2 (+3.5% counted as its transient beside every activation it would save, found "
         "by a random run)")
EXPERTS_COMBINE_BACKWARD = Formula(
    "temporaries/layer_backward",
    "lambda t_m, H, w_c, w_x, T, h, r, c: t_m * H * (3 * w_c + w_x) + T * h * max(r, c)",
    id="act.experts_combine_backward", source=SRC,
    title="A MoE layer's first backward moment, through its weighted sum of the experts' "
          "outputs: the gathered gradient scattered back (index_put), and its products with "
          "the routing weights and with the experts' outputs, beside the incoming gradient",
    note="w_c: the weighted outputs' width (fp32 where the routing weights are, else the "
         "experts'); w_x: the experts' output gradient cast back to their width where it "
         "differs, else 0 (traced: DeepSeek-V3 at micro-batch 4, the step's peak)")
EXPERT_ADAPTER_COPIES = Formula(
    "activations/lora", "lambda S_e, c: S_e * c", id="act.lora_expert_adapter_copies",
    source=PEFT_EXPERTS,
    title="LoRA on routed experts: the fp32 adapter factors cast to the weight's dtype for "
          "the fold, kept by it for backward (none where they are in that dtype already: fp32 "
          "weights, or DeepSpeed's engine, which casts the adapters)")
RESID_DROPOUT = _f("dropout", "lambda T, h: 2 * T * h", "resid_dropout",
                   "Residual dropout's masks after attention and after the MLP")
# --- LoRA and autocast copies -------------------------------------------------------------------
LORA_A_OUT = _f("lora", "lambda T, r_L, n_a, w_r: T * r_L * n_a * w_r", "lora_a_output",
                "Each adapter's lora_A output, kept by lora_B")
ADAPTER_COPIES = _f("weight_copies", "lambda c, r_L, S_a: c * r_L * S_a", "adapter_weight_copies",
                    "Autocast's low-precision copies of the adapter weights")
WEIGHT_COPIES = _f("weight_copies", "lambda c, W_l: c * W_l", "weight_copies",
                   "Autocast's low-precision copy of each weight, kept for backward")
# --- per layer ------------------------------------------------------------------------------
CHECKPOINT_INPUT = _f("checkpointed_inputs", "lambda T, h, r: T * h * r", "checkpoint_input",
                      "What a checkpointed layer keeps: its input")
SELECTIVE_KEPT = Formula(
    "activations/selective_kept", "lambda T, h, r, K_o: T * h * r + K_o",
    id="act.selective_kept", source=TORCH_SAC,
    title="What a layer keeps under per-op selective checkpointing: its input and the outputs "
          "of the ops the policy saves (every other matmul, every addmm, the attention kernel)")
SELECTIVE_OUTPUTS = Formula(
    "activations/selective_kept", "lambda K_o: K_o", id="act.selective_outputs",
    source=TORCH_SAC,
    title="What a pipeline stage's first layer keeps under per-op selective checkpointing: "
          "the outputs of the ops the policy saves; its input is the stage's receive buffer")
FORWARD_TRANSIENT = Formula(
    "temporaries/layer_forward", "lambda T, H, h, r: T * H * 4 + T * h * r",
    id="act.forward_transient", source=SRC,
    title="A layer's widest forward moment: an fp32 H-wide temporary beside the residual")
LORA_FORWARD_TRANSIENT = Formula(
    "temporaries/layer_forward", "lambda T, d_i, c, q_c, q_d, d_o, c_o, w_r, h, r: T * d_i * "
    "(c + q_c + q_d) + T * d_o * (c_o + 2 * w_r) + T * h * r", id="act.lora_forward_transient",
    source=SRC,
    title="A LoRA layer's widest forward moment, at the adapted projection with the widest "
          "input: that input (which the frozen projection does not keep), peft's fp32 copy of "
          "it and lora_dropout's output of the copy, beside the frozen projection's output "
          "(d_o wide, c_o bytes), lora_B's and its scaled copy (in the adapter's compute "
          "dtype, w_r bytes) and the residual",
    note="q_c: peft's copy under autocast (cast down again for lora_A; none under FSDP2's "
         "mixed precision or bitsandbytes' layer), 0 without autocast (the copy is what "
         "lora_A saves); q_d: the dropout's output where lora_A keeps another tensor (its "
         "autocast cast), or the copy it dropped, beside the mask the dropout keeps (both "
         "`peft_input`; traced: an 8B width, LoRA on every linear with dropout under "
         "autocast, -8.5% without it, found by random runs); under DeepSpeed's ZeRO-3 lora_A "
         "keeps the dropout's output itself and q_d is autocast's cast inside it; where the "
         "output is in the compute dtype already (FSDP2's mixed precision: no cast), lora_A "
         "keeps it, saved with the layer, and q_d is 0 but under per-op selective "
         "checkpointing (held out: +4.10% and +2.60% checkpointed, +1.58% not, counting it "
         "again). w_r: the "
         "compute dtype under autocast, FSDP2's mixed precision or DeepSpeed's engine cast, "
         "else the adapters' fp32 (pure bf16: -1.9% with lora_B's output and its scaled copy "
         "counted in bf16, found by random runs). The frozen projection's output, peft's "
         "`result`, is alive through the adapter's (-1.0% without it on the checkpointed "
         "LoRA cases). Traced on 4-layer llama-3-8b probes")
CHECKPOINTED_MLP = Formula(
    "temporaries/layer_forward",
    "lambda T, f, h, z, r, c_m, c, w_r, W_q, W_c, u_g, q_x, u_d, q_c, q_d, c_a, a: "
    "T * h * (z + r) + max(3 * T * f * c_m - W_c * c, 2 * T * f * c_m + (W_q - W_c) * c, "
    "T * f * c_m + T * h * c * (1 + a), "
    "u_g * (T * f * (2 * c_m + 2 * w_r) + T * h * q_x) - W_c * c, "
    "u_d * (T * f * (c_m + q_c + q_d + c_a) + T * h * c_m))",
    id="act.checkpointed_mlp", source=SRC,
    title="A checkpointed layer's forward, which saves nothing: at its gated MLP the normed "
          "input and the residual beside the widest of the gating product (the up "
          "projection's output, the activated gate, their product), QLoRA's up projection "
          "(its dequantised weight, W_q elements, beside the activated gate), an adapted up "
          "projection (its frozen output, lora_B's and its scaled copy beside the activated "
          "gate, peft's copy of the input) and an adapted down projection (its input, its "
          "frozen output, peft's copy of the input, lora_dropout's output of it and lora_A's "
          "autocast cast; the dropout's mask is freed at once). Under autocast's weight cache, "
          "counted whole for the layer, the down projection's copy (W_c elements) is not made "
          "before the down projection runs, beside the gating product and its output",
    note="dense layers on one GPU or under tensor parallelism without sequence parallelism "
         "(f: the GPU's share of the MLP's width; a: 1 where the down projection's partial "
         "output is all-reduced, out of place, beside it: traced under TP2 with amp; with "
         "sequence parallelism the gathered input is not in it); under per-op selective "
         "checkpointing beside the outputs the policy kept so far (its every-other-matmul "
         "count leaves the up projection's output out on the layers traced, so none is "
         "counted twice). u_g: 1 with an adapter on the gate or up projection; q_x, "
         "q_c: peft's copy of the MLP's or the down projection's input (`peft_input`); c_a: "
         "lora_A's autocast cast where its input is wider. Traced on an 8B width at 12K "
         "tokens: full training under autocast and amp, LoRA on every linear with and "
         "without dropout, LoRA on the attention, QLoRA (the top layer's forward counted as "
         "its transient beside every activation it would save was 0.5 to 1.3 GB over, +21% on "
         "LoRA under FSDP2 at stage 2, found by random runs)")
FORWARD_TRANSIENT_SINKS = Formula(
    "temporaries/layer_forward",
    "lambda T, H, h, r, b, a, s, m, c_p: max(T * H * 4 + T * h * r, b * a * s**2 * (m - c_p))",
    id="act.forward_transient_sinks", source=SRC,
    title="A layer's widest forward moment; eager with sinks: the softmax's input beside its "
          "output, less the cast not yet made")
FORWARD_TRANSIENT_EAGER = Formula(
    "temporaries/layer_forward",
    "lambda T, H, h, r, b, a, s, m, c, c_u, c_q, A_sm: "
    "max(T * H * 4 + T * h * r, b * a * s**2 * max(0, m + c_u - c, c_q) - A_sm)",
    id="act.forward_transient_eager", source=SRC,
    title="A layer's widest forward moment; eager: the softmax's input beside its output and "
          "its fp32 copy of a 16-bit input, or beside the output's cast to the queries' dtype "
          "(c_q), less what the layer saves after it (A_sm, not built yet)",
    note="ATen's softmax with dtype=float32 converts its input first (only CUDA's fp16 takes "
         "the half-to-float kernel), as autocast does for a softmax it upcasts; the copy lives "
         "beside the output until the kernel returns (traced: Mistral's width under autocast "
         "in bf16, checkpointed and per-op selective, 2 GiB at 4K tokens)")
BACKWARD_TRANSIENT = Formula(
    "temporaries/layer_backward",
    "lambda n_x, T, f_w, c, h, r: n_x * T * f_w * c + T * h * max(r, c)",
    id="act.backward_transient", source=SRC,
    title="A layer's widest backward moment: MLP-wide gradients and the incoming gradient",
    note="n_x = 3 MLP-wide gradients (the down projection's input's, the gating product's "
         "two), 2 where an adapter on the down projection (LoRA, QLoRA) keeps its input, "
         "freed by then, and in routed experts; traced layer by layer on 4-layer llama-3-8b "
         "probes, and with the down projection bare (-3.2% with 2)")
QLORA_MLP_BACKWARD = Formula(
    "temporaries/layer_backward", "lambda T, f_w, c_m, u_d, q_a, h, r, c: "
    "T * f_w * (3 * c_m - u_d * q_a) + T * h * max(r, c)", id="act.qlora_mlp_backward",
    source=QLORA,
    title="A QLoRA layer's widest backward moment in its MLP: three MLP-wide gradients, c_m "
          "wide (the gating product's and the two it makes; or, with an adapter on the down "
          "projection (n_a = 1), its input's gradients from the 4-bit base and from the "
          "adapter, each cast back to the input's dtype, and their sum, less the adapter's "
          "saved input, freed by then), beside the incoming gradient",
    note="traced op by op on 2-layer llama-3-8b-shaped QLoRA layers, under amp (c_m = 4) and "
         "autocast; a plain LoRA layer keeps BACKWARD_TRANSIENT's two (its attention-only "
         "recipes traced closer so)")
DEQUANT_BACKWARD = Formula(
    "temporaries/layer_backward", "lambda T, h, g_w, f_w, u_d, c_m, q_a, c, W_q: T * h * g_w + "
    "T * f_w * (u_d * (c_m - q_a) + c) + W_q * c", id="act.dequant_backward", source=QLORA,
    title="A QLoRA layer's down projection, backward: bitsandbytes dequantises the whole "
          "4-bit weight (W_q parameters) to the compute dtype for the input's gradient, beside "
          "that gradient, the adapter's (its saved input freed) and the incoming gradient")
DEQUANT_RECOMPUTE = Formula(
    "temporaries/layer_forward", "lambda W_u, c, T, h, k_r, r, z: W_u * c + T * h * (k_r * r + z)",
    id="act.dequant_recompute", source=QLORA,
    title="A checkpointed QLoRA layer's recomputation, whose frozen down projection saves no "
          "tensor (bitsandbytes keeps its 4-bit weight out of autograd's saved tensors): it "
          "stops once the gating product has saved its inputs, its widest moment the up "
          "projection's whole weight dequantised (W_u parameters), beside the MLP's input (z: "
          "its width; the MLP has no adapter to keep it) and the residual after attention "
          "where the norms do not keep it (k_r = 1)",
    note="torch.utils.checkpoint's early stop; the down projection's input gradient, computed "
         "before the recomputation, is beside it (traced: a Llama 3 8B width, QLoRA on q and "
         "v, autocast, +2.6% counted at the down projection's moment)")
DEQUANT_FORWARD = Formula(
    "temporaries/layer_forward",
    "lambda T, f_w, c_d, W_q, c, h, n_s, r, z: T * f_w * c_d + W_q * c + T * h * (c + n_s * r + z)",
    id="act.dequant_forward", source=QLORA,
    title="A QLoRA layer's widest forward moment, at its down projection's base: the whole "
          "4-bit weight dequantised to the compute dtype (W_q parameters) and the output, "
          "beside the projection's input where the layer does not keep it (its adapter's "
          "copy not made yet), the MLP's input, which its forward holds (z: its width, 0 "
          "where its adapters keep it as it is), and the layer's input and the residual "
          "after attention where the norms do not keep them (n_s = 2, else 0)",
    note="traced op by op on 2-layer llama-3-8b-shaped QLoRA layers, amp and autocast")
DOWN_ADAPTER_FORWARD = Formula(
    "temporaries/layer_forward",
    "lambda T, h, c_o, f, w, u_x, q_c, k_d: T * h * c_o + T * f * (u_x * w + q_c - k_d)",
    id="act.down_adapter_forward", source=QLORA,
    title="A LoRA down projection's forward at its adapter: its frozen output (peft's "
          "`result`; bitsandbytes' 4-bit layer's clone of it, the original freed), c_o bytes "
          "wide, peft's cast of its input to the adapter's dtype (q_c) and the input itself, w "
          "bytes wide, where nothing keeps it as it is (u_x = 1: bitsandbytes' layer saves "
          "none, and the adapter keeps its dropout's output); before its base layer runs none "
          "of these but that input, and the adapter's copy and the dropout's mask among the "
          "layer's saved tensors not made yet (k_d bytes an element)",
    note="traced: LoRA and QLoRA under DeepSpeed's ZeRO-3, alive as a wait copies the head "
         "out of a coalesced prefetch (QLoRA with dropout: -0.88% without the input at "
         "lora_A, +0.96% with it and the adapter's copy at the base layer; LoRA with dropout "
         "at lora_B: -0.41% without peft's fp32 cast)")
NORM_FORWARD = Formula(
    "temporaries/layer_forward", "lambda T, h, r_c, z: T * h * (4 + r_c + z)",
    id="act.norm_forward", source=SRC,
    title="An RMSNorm's forward at its weight multiply, its weight frozen and its output kept "
          "by nothing: the normalised tensor in fp32, its cast back to the input's dtype (r_c: "
          "none for an fp32 input) and the output, beside its saved fp32 input",
    note="traced: Mixtral under DeepSpeed's ZeRO-3 with LoRA on the attention, the forward's "
         "peak at the top layer's post-attention norm")
ATTENTION_BACKWARD_SINKS = Formula(
    "temporaries/layer_backward",
    "lambda b, a, s, m, c_p, T, h, r, d, c: b * a * s**2 * (2 * m - c_p) + T * h * max(r, c) + "
    "T * a * d * c",
    id="act.attention_backward_sinks", source=SRC,
    title="Eager attention with sinks, backward: the probabilities' gradient and the "
          "softmax's input gradient in the mask's dtype beside the saved probabilities (then "
          "the max's scattered gradient in their place), beside the gradients coming in (as "
          "act.attention_backward_eager's)",
    note="traced op by op: gpt-oss-20b-4L, amp and bf16")
ATTENTION_BACKWARD_LAYER = Formula(
    "temporaries/layer_backward", "lambda X_l, A_m: X_l - A_m", id="act.attention_backward_layer",
    source=SRC,
    title="A layer's backward at its attention's softmax (eager, SDPA's math kernel): its "
          "transient, beside the layer's activations less what their backward freed before "
          "(A_m): the MLP's and the norms' after the attention, autocast's copies of their "
          "weights and the output projection's; eager's, that projection's input and the "
          "values",
    note="traced: gpt-oss-20b-4L under 1F1B (+0.97% counted beside the MLP's activations), "
         "mistral-7b-4L on a V100, checkpointed, and 8B-wide stacks at 4K tokens")
RING_ATTENTION_BACKWARD = Formula(
    "temporaries/layer_backward",
    "lambda Q_r, K_r, c, n_cp: 4 * Q_r + 12 * K_r + c * (K_r * (n_cp + 3) + floor(3 * Q_r / 2))",
    id="act.ring_attention_backward", source=SRC,
    title="Context parallelism's ring attention, backward (torch's "
          "_templated_ring_attention_backward, rank 0) at its second step's kernel: the fp32 "
          "accumulators of dq (Q_r elements) and of dk, dv (K_r together), the dk/dv send "
          "buffer and the all-to-all's output beside the received one, the K/V all-gather "
          "(n_cp copies) and the local K/V sent, and the first step's gradients beside the "
          "second's (a load-balanced half of q)",
    note="Q_r = T a d_qk, K_r = T k (d_qk + d_v): the keys and values as SDPA receives them "
         "(MLA's k = a; GQA's unrepeated heads, transformers' enable_gqa); traced: DeepSeek-V3's "
         "MLA under FSDP2 x CP2, 3.1 GB at 3K tokens (-8.1% without it, random runs), Phi-3's "
         "MHA, 120.37 MB at the kernel against the formula's 120.32 (-3.79% without it)")
ATTENTION_BACKWARD_MATH = Formula(
    "temporaries/layer_backward", "lambda b, a, s: 8 * b * a * s**2",
    id="act.attention_backward_math", source=SRC,
    title="SDPA's math kernel, backward: the fp32 probabilities' gradient and the scores' "
          "beside the saved probabilities (traced: fp16 on Volta and Turing GPUs)")
ATTENTION_BACKWARD_EAGER = Formula(
    "temporaries/layer_backward", "lambda b, a, s, c, T, h, r, d, c_g: b * a * s**2 * "
    "(4 + c_g - c) + T * h * max(r, c) + T * a * d * c", id="act.attention_backward_eager",
    source=SRC,
    title="Eager attention, backward: the softmax's fp32 gradients (its output's and, c_g, its "
          "input's), beside the gradients coming in (the residual's, waiting for the "
          "attention's to be added, and the attention output's)",
    note="traced op by op: mistral-7b-4L at 2K and 4K tokens, amp, checkpointed (-0.9% "
         "without the incoming gradients); CUDA's fp16 half-to-float softmax returns its "
         "input's gradient in fp16 (Mistral's width, fp16 under per-op selective "
         "checkpointing: +4.9% counting it in fp32)")
# --- the ends of the model ----------------------------------------------------------------------
HEAD_NORMS = tuple(f.booked("activations/head") for f in (
    NORM_INPUT, NORM_STATS, NORM_FP32_COPY, NORM_RSQRT, NORM_OUT_FP32, NORM_OUT))
HEAD_INPUT = _f("head", "lambda T, H, q: T * H * q", "head_input", "The lm_head's saved input")
HEAD_NORM_BACKWARD = Formula(
    "temporaries/head_norm_backward", "lambda T, h, u_n: T * h * (16 + u_n)",
    id="act.head_norm_backward", source=SRC,
    title="The final RMSNorm's backward, every activation still saved: four T h fp32 "
          "tensors at the backward of variance = x.pow(2).mean(-1) (x's gradient, the mean's "
          "expanded gradient, and pow's x and 2 x); beside them, where the head and the norm "
          "are frozen, what full training has freed by then in their place (the head's saved "
          "input, the norm's normalised output)",
    note="traced op by op on 4-layer llama-3-8b probes, full, LoRA and QLoRA")
INPUT_NORM_BACKWARD = Formula(
    "temporaries/norm_backward", "lambda T, h, c, r: T * h * (16 + c + r)",
    id="act.input_norm_backward", source=SRC,
    title="A layer's input RMSNorm's backward where a split backward's input pass ends: the "
          "four T h fp32 tensors of HEAD_NORM_BACKWARD beside the gradient at the norm's "
          "output (c bytes) and the residual stream's (r), every activation still saved and "
          "every output gradient kept for the weight pass",
    note="traced: zero bubble over four Llama 3 8B-wide ranks in bf16, the peak (-0.5% with "
         "the fp32 tensors alone), and a ZBV rank's head chunk under autocast (a random run's "
         "peak, where calc's stays its first layer's moment)")
FINAL_HIDDEN = _f("head", "lambda T, H, z: T * H * z", "final_hidden",
                  "The model's last hidden state, the final norm's output: held by the model's "
                  "output through the loss where the head keeps a cast of it or nothing")
HEAD_COPY = _f("weight_copies", "lambda V_t, H, c: V_t * H * c", "head_weight_copy",
               "Autocast's low-precision copy of the lm_head weight")
OUTPUT_GRADS = Formula(
    "temporaries/output_grads",
    "lambda T, O_l, c, N_l, z, Q_n, z_q, O_e, c_e: T * (O_l * c + N_l * z + Q_n * z_q + O_e * c_e)",
    id="act.output_grads", source=TORCH_SCHEDULES,
    title="A layer's output gradients kept for the weight backward of a split backward: each "
          "projection's and each norm's, where the weights' gradients start",
    note="torch's stage_backward_input hooks every node where a weight's gradient meets the "
         "input's path and keeps the gradient reaching it until stage_backward_weight: O_l "
         "trained projection outputs per token (c each), N_l hidden-size norm outputs (their "
         "output width z), Q_n = (a + k) d per-head q/k norm outputs (z_q wide: the weight "
         "as stored times the heads cast back, fp32 under amp; traced: qwen3 ZBV, 512 MiB "
         "kept per layer at 4096 tokens), O_e the routed experts' outputs, their routed rows "
         "spread over the tokens, in the experts' width c_e (grouped_mm is not autocast: fp32 "
         "under amp)")
HEAD_OUTPUT_GRADS = Formula(
    "temporaries/output_grads", "lambda T, V_t, c, H, z: T * (V_t * c + H * z)",
    id="act.head_output_grads", source=TORCH_SCHEDULES,
    title="The head's output gradients kept for the weight backward: the logits' (c) and the "
          "final norm's (z wide)")
EMBEDDING_DROPOUT = _f("dropout", "lambda T, h: T * h", "embedding_dropout",
                       "Embedding dropout's one-byte mask (GPT-2's embd_pdrop)")
EMBEDDING_HELD = _f("embedding", "lambda b, s, h, r, u_p: (b + u_p) * s * h * r",
                    "embedding_held", "The embedding's output (and learned positions), held by "
                    "the model's forward (`inputs_embeds`) through its layers' forward, where the "
                    "first layer does not keep it as its input")
EAGER_MASK = _f("attention_mask", "lambda b, s, m, n_m: n_m * b * s**2 * m", "eager_mask",
                "Eager attention's (b, 1, s, s) additive causal mask (and the sliding window's, "
                "where layers slide), alive through the forward")
SLIDING_BIAS = Formula(
    "activations/attention_mask", "lambda b, s, c: b * s * ceil(s / 16) * 16 * c",
    id="act.sliding_bias", source=TORCH_SDPA,
    title="A masked layer under SDPA (a sliding window, or padding): the boolean mask made an "
          "additive bias in the compute dtype (its last dimension padded to 16), kept by the "
          "memory-efficient kernel for backward, one per layer",
    note="transformers passes the sliding layers a (b, 1, s, s) mask once s reaches the window "
         "(the global layers keep is_causal and flash), and every layer one where the batch "
         "is padded; SDPA converts it per call (convert_boolean_attn_mask, preprocess_mask) "
         "and the mask rules flash out")
SLIDING_KV = Formula(
    "activations/attention", "lambda T, a, k, d, c, n_kv: n_kv * T * (a - k) * d * c",
    id="act.sliding_kv", source=TORCH_SDPA,
    title="A masked layer under SDPA (a sliding window, or padding): K and V repeated to every "
          "query head (transformers' repeat_kv: the masked kernel takes no grouped heads), kept "
          "beyond the grouped heads")
PADDING_MASK = Formula(
    "activations/attention_mask", "lambda b, s, n_m: n_m * b * s**2", id="act.padding_mask",
    source=TORCH_SDPA,
    title="A padded batch under SDPA: the boolean (b, 1, s, s) mask of causality and padding "
          "(and the sliding window's, where layers slide), alive through the forward")
SLIDING_MASK = Formula(
    "activations/attention_mask", "lambda s: s**2", id="act.sliding_mask", source=TORCH_SDPA,
    title="The sliding window's boolean (1, 1, s, s) mask, expanded over the batch, alive "
          "through the forward")
# what the experts' fold keeps: the MLP's, freed by its backward like its activations
FOLDED = (EXPERT_WEIGHTS, EXPERT_ADAPTER_COPIES)


class LayerActivations(NamedTuple):
    """Memory of one decoder layer for one micro-batch (build it with `layer_activations`)."""

    saved: tuple[Term, ...]  # saved for backward (a term twice when two ops save alike)
    forward_transient: Term  # extra bytes alive at the layer's worst forward moment
    backward_transient: Term  # gradient buffers alive at the layer's worst backward moment
    checkpoint_input: Term  # what the layer keeps when checkpointed: its input (and, under
    # per-op selective checkpointing, the outputs the policy saves)
    total: int  # bytes of `saved`
    weight_copies: tuple[Term, ...]  # the part of `saved` that is autocast's weight cache
    saves_residual: bool  # a norm keeps the residual itself (the checkpoint's own input)
    kept_in_saved: int  # bytes of checkpoint_input that are also among `saved`
    mlp_bytes: int  # bytes of `saved` that the MLP keeps (freed by the MLP's backward)
    last_input: int = 0  # bytes of `saved` freed before the widest backward moment: a gated
    # MLP's down projection's input, freed by that projection's backward, which runs first
    # per-op selective checkpointing: the outputs checkpoint_input keeps that `saved` does
    # not; its recomputation takes them back (each op it saved returns its kept output) and
    # frees them once used, so past it the layer keeps nothing beside what it saves
    consumed: int = 0
    # eager attention (or SDPA's math kernel): the bytes of `saved` that its forward builds
    # after the softmax and its backward frees before the softmax's (what the norms after the
    # attention and the MLP keep, eager's the output projection's input), the part of them
    # that is autocast's copies of the MLP's and the output projection's weights, the outputs
    # checkpoint_input keeps by then, and the values (eager's, repeated) the probabilities
    # multiply, built before the softmax, freed by their product's backward before its
    after_softmax: int = 0
    after_softmax_copies: int = 0
    kept_after_softmax: int = 0
    kept_saved_after_softmax: int = 0  # (of kept_after_softmax, what `saved` holds too)
    softmax_values: int = 0
    # a checkpointed layer's forward, which saves nothing: what its MLP holds at its widest
    # (`checkpointed_mlp`, `CHECKPOINTED_MOE`, with LoRA on the routed experts
    # `CHECKPOINTED_MOE_FOLDED`; None where not modelled: non-gated MLPs, tensor and expert
    # parallelism)
    checkpointed_forward: Term | None = None
    # a checkpointed layer's backward before its recomputation: what it computes before it
    # first unpacks a saved tensor (QLoRA's frozen down projection: its input's gradient)
    before_recompute: int = 0
    # eager attention's forward at its softmax (`FORWARD_TRANSIENT_EAGER`), whichever of the
    # layer's transients is the widest (LoRA's may be): the moment of a checkpointed forward
    softmax_forward: Term | None = None
    # where the attention's softmax is the widest backward moment (`ATTENTION_BACKWARD_LAYER`):
    # the MLP's, earlier, whose weights DeepSpeed's ZeRO-3 still holds gathered
    mlp_backward: Term | None = None
    # a checkpointed layer's recomputation where its widest forward moment differs from the
    # forward's (`DEQUANT_RECOMPUTE`: QLoRA's stops before its frozen down projection)
    recompute_forward: Term | None = None
    # the part of `saved` that is autocast's copies of the MLP's weights (not routed experts'),
    # freed by the MLP's backward with its activations
    mlp_copies: int = 0
    # where the MLP's backward is the widest moment but the eager softmax's, later, comes close
    # (`ATTENTION_BACKWARD_LAYER`): FSDP holds more unsharded gradients beside it
    softmax_backward: Term | None = None
    # the part of `mlp_bytes` a MoE layer's routed experts' backward leaves alive: a shared
    # expert computed before them (Qwen2-MoE), whose backward runs after theirs
    shared_after_experts: int = 0
    # the part of `saved` the input norm keeps (its fp32 input, its statistics, its normalised
    # tensor): all the layer holds at its input norm's backward, the last of its backward
    input_norm: int = 0

    @property
    def experts_freed(self) -> int:
        """What a MoE layer's backward has freed once its routed experts' is done."""
        return self.mlp_bytes - self.shared_after_experts

    @property
    def recomputed_shared(self) -> int:
        """Bytes of checkpoint_input that the layer's recomputed activations count too."""
        return self.kept_in_saved + self.consumed


def layer_activations(saved: tuple[Term, ...], forward: Term, backward: Term,
                      checkpoint_input: Term, frozen_base: bool = False,
                      kept_outputs_in_saved: int = 0, last_input: int = 0,
                      kept_outputs: int = 0,
                      after_softmax: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0),
                      checkpointed_forward: Term | None = None,
                      before_recompute: int = 0,
                      softmax_forward: Term | None = None,
                      mlp_backward: Term | None = None, mlp_copies: int = 0,
                      recompute_forward: Term | None = None,
                      softmax_backward: Term | None = None,
                      shared_after_experts: int = 0, input_norm: int = 0) -> LayerActivations:
    # autocast caches the casts of leaf weights that train; a frozen base's casts are made
    # per op and saved, so a checkpointed layer drops them
    copies = tuple(t for t in saved if t.key == "activations/weight_copies"
                   and not (frozen_base and t.formula is WEIGHT_COPIES))
    residual = any(t.bytes for t in saved if t.key == "activations/residual")
    # the residual the norms save is the checkpoint's own input
    shared = kept_outputs_in_saved + (layer_input(checkpoint_input) if residual else 0)
    total = mlp = 0
    for t in saved:
        total += t.bytes
        if t.key == "activations/mlp" or (t.key == "activations/lora" and t.formula in FOLDED):
            mlp += t.bytes
    return LayerActivations(saved, forward, backward, checkpoint_input, total, copies, residual,
                            shared, mlp, last_input, kept_outputs - kept_outputs_in_saved,
                            *after_softmax, checkpointed_forward, before_recompute,
                            softmax_forward,
                            mlp_backward if backward.formula is ATTENTION_BACKWARD_LAYER else None,
                            recompute_forward, mlp_copies,
                            None if backward.formula is ATTENTION_BACKWARD_LAYER
                            else softmax_backward, shared_after_experts, input_norm)


def received_kept(kept: Term) -> tuple[Term, ...]:
    """What a checkpointed layer keeps (CHECKPOINT_INPUT or SELECTIVE_KEPT) but its input:
    a pipeline stage's first layer, whose input is the stage's receive buffer."""
    if kept.formula is SELECTIVE_KEPT:
        return (SELECTIVE_OUTPUTS(kept.values[3]),)
    return ()


def layer_input(kept: Term) -> int:
    """The layer input's bytes inside `kept` (CHECKPOINT_INPUT or SELECTIVE_KEPT)."""
    if kept.formula is SELECTIVE_KEPT:
        T, h, r = kept.values[:3]
        return int(T * h * r)
    return kept.bytes


def decoder_layer(x: Setup, layer: LayerParams, frozen_input: bool = False,
                  sliding: bool = False) -> LayerActivations:
    """Activations of one decoder layer as transformers' modules save them. `frozen_input`:
    the layer's input needs no gradient (`frozen_input_layer`): its input norm and the base
    projections reading it build no autograd node and keep nothing; their adapters keep their
    input, lora_B its weight, lora_A not its own. `sliding`: a sliding-window layer masked
    under SDPA (`Setup.sliding_sdpa`)."""
    n, T, tp = x.n, x.T, x.tp
    trainable = not x.lora
    # the projections keep their inputs; QLoRA's are bitsandbytes' 4-bit layers, whose
    # matmul runs F.linear inside its own autograd function (no graph there), so DeepSpeed's
    # swap of F.linear keeps nothing of them (traced: the same layers as on one GPU)
    keeps = trainable or (x.frozen_linear_inputs and not x.qlora)
    targets = x.lora_targets
    r, c = n.residual, n.compute
    saved: list[Term] = []
    # --- norms before attention and MLP (and Gemma 2's post-norms) ---------------------------
    times = 1 if frozen_input else 2
    z_width = _norm(x, saved, trainable, times)
    pre_norms = len(saved)
    # (two norms' terms alike, the input norm's first; a frozen input keeps none of its own)
    input_norm = sum(t.bytes for t in saved) // 2 if times == 2 else 0
    if x.arch.traits.norms_per_layer == 4:  # post-attention / post-feedforward norms
        saved += [POST_NORM(T, x.h, 2 if trainable else 1)] * 2
    norms = len(saved)
    # --- inputs of the projections reading the normed hidden states --------------------------
    drop = x.lora_dropout
    _linear_inputs(x, saved, "attention", layer.attention_inputs, z_width,
                   keeps and not frozen_input, drop)
    if not layer.moe:
        _linear_inputs(x, saved, "mlp", layer.mlp_inputs, z_width, keeps, drop)
    # --- attention core ----------------------------------------------------------------------
    a, k, d = x.a, x.k, x.d
    arch = x.arch
    if arch.is_mla:
        assert arch.kv_lora_rank and arch.qk_nope_head_dim and arch.qk_rope_head_dim
        for rank, b_proj in ((arch.q_lora_rank, "q_b_proj"), (arch.kv_lora_rank, "kv_b_proj")):
            if not rank:
                continue
            saved.append(MLA_LATENT(T, rank, c) if trainable else MLA_LATENT_FROZEN(T, rank))
            if b_proj in targets:  # the frozen b-projection keeps nothing; its adapter does
                _adapter_input(x, saved, "attention", rank, drop, 4 if r == 4 else c,
                               shared=not _adapter_copies(x, drop))
        saved.append(MLA_WIDTHS(T, a, arch.qk_nope_head_dim + arch.qk_rope_head_dim,
                                arch.qk_nope_head_dim + (arch.v_head_dim or arch.qk_nope_head_dim),
                                d, c))
    elif arch.traits.qk_norm:
        c_n = 4 if _normalised_fp32(x, c) else c
        for heads in (a, k):
            saved.append(QK_NORM(T, heads, d, c_n if trainable else 0))
    rotary = arch.traits.rotary
    # SDPA's math kernel: the unmasked layers' (a masked one's K/V are repeated for the
    # memory-efficient kernel), unless the attention core is recomputed
    math = x.math_attention and not sliding and not x.selective_attention
    if math:  # (in fp32, whatever the inputs' width)
        saved.append(MATH_QKV(T, a, d))
        saved.append(MATH_PROBS(x.b, a, x.s))
        if keeps:  # the output, transposed for o_proj
            saved.append(EAGER_OUT(T, a, d, c))
    elif not x.eager or x.selective_attention:
        saved.append(QKV(T, a, k, d, c))  # SDPA sees low-precision q, k, v under autocast
        # v is a view of the fused output where SDPA takes it as it is: not where autocast
        # casts it, a 4-bit projection having returned its fp32 input's width (QLoRA, amp)
        if arch.traits.fused_qkv and rotary != "none" and projection_width(x, z_width) == c:
            saved.append(FUSED_QKV_OUT(T, a, k, d, c))
        d_v = arch.v_head_dim if arch.is_mla and arch.v_head_dim else d  # (MLA: the values')
        saved.append(ATTN_OUT(T, a, d_v, c))
        saved.append(LSE(T, a))
        if sliding or x.padded_sdpa:  # the memory-efficient kernel: the mask as a bias, K
            # and V repeated
            saved.append(SLIDING_BIAS(x.b, x.s, c))
            copies = 2 if k > 1 else 1 if n.autocast and r == 4 else 0
            if copies and k < a:
                saved.append(SLIDING_KV(T, a, k, d, c, copies))
        # (context parallelism's ring attention merges its output in the kernel's layout, so
        # transpose().contiguous() copies it for o_proj there too)
        if keeps and (x.cp > 1 or (rotary == "cat" and not (sliding or x.padded_sdpa))):
            saved.append(TRANSPOSED_OUT(T, a, d_v, c))
    else:
        saved.append(EAGER_QKV(T, a, d, c))
        if keeps:
            saved.append(EAGER_OUT(T, a, d, c))
        if arch.traits.sinks:
            saved.append(SINK_SOFTMAX(x.b, a, x.s, mask_width(x), sink_cast(x)))
        else:
            width = 4 if arch.traits.softmax_upcast or n.autocast_ops else c
            probabilities = c if width != c or arch.attention_dropout else 0
            saved.append(SOFTMAX(x.b, a, x.s, width, probabilities))
        if arch.attn_logit_softcapping:
            saved.append(SOFTCAP(x.b, a, x.s, c))
        if arch.attention_dropout:
            saved.append(SCORES_DROPOUT(x.b, a, x.s))
    o_proj = dict(layer.by_name).get("o_proj") if "o_proj" in targets else None
    before_out = len(saved)
    if o_proj is not None:
        o_in = o_proj.local_shape(tp)[1]  # a d, or MLA's a d_v
        if _adapter_copies(x, drop):
            _adapter_input(x, saved, "attention", o_in, drop, c)
        elif (x.eager or x.math_attention) and not keeps:  # the transposed output: a copy
            # only the adapter keeps
            _adapter_input(x, saved, "attention", o_in, drop, c, shared=True)
        # else o_proj's input is SDPA's output itself (already saved): nothing more
    out_kept = sum(t.bytes for t in saved[before_out:])  # (what o_proj's adapter keeps)
    # --- MLP ---------------------------------------------------------------------------------
    last_input = 0
    w_m = c
    bare = False  # a LoRA layer's down projection without an adapter
    before = 0  # what the layer's checkpointed backward computes before its recomputation
    recompute_fwd: Term | None = None  # its recomputation's widest moment, where it differs
    shared_after_experts = 0
    if layer.moe:
        shared_after_experts = _moe(x, layer, saved, z_width, trainable)
    else:
        mlp = [lin for lin in layer.linears if lin.group == "mlp"]
        down = mlp[-1]
        f = down.in_features // tp
        # the down projection's input is kept by the projection (full training), by its
        # LoRA adapter (its own copy in pure mode), or by nobody (no adapter on it)
        w_m = projection_width(x, z_width)
        _mlp_core(x, saved, T, f, down_input=keeps, width=w_m)
        # what down_proj's backward frees before the layer's widest backward moment (eager
        # attention's can be the softmax's instead, after the MLP's: not split in two): the
        # gating product, its input, where it trains; bare, the weight cast it keeps under
        # autocast (WEIGHT_COPIES)
        bare = x.lora and not adapted(down, targets)
        if bare and x.qlora:
            # bitsandbytes keeps its 4-bit weight out of autograd's saved tensors: the frozen
            # down projection's backward, its input's gradient, runs before anything unpacks
            # and so before the recomputation (traced: per-op selective, -2.7% without it),
            # which, fully checkpointed, stops before that projection (DEQUANT_RECOMPUTE)
            before = T * f * w_m
            if not x.selective_ops and arch.traits.mlp == "gated" and len(mlp) == 3:
                recompute_fwd = dequant_recompute(x, mlp, saved, z_width)
        if arch.traits.mlp == "gated" and not (x.eager or x.math_attention):
            if trainable:
                last_input = T * f * c
            elif bare and n.weight_copies and not x.qlora:
                last_input = down.local_counts(tp, x.ep)[0] * c
        copies = _adapter_copies(x, drop, w_m)
        if not trainable and adapted(down, targets) and (copies or not keeps):
            _adapter_input(x, saved, "mlp", f, drop, w_m, shared=not copies)
    if arch.resid_pdrop:
        saved.append(RESID_DROPOUT(T, x.h))
    # --- LoRA: lora_A's output kept by lora_B (adapter dtype fp32, or autocast's cast) -------
    if targets:  # (the adapters on tokens: not those folded into the experts' weights)
        adapters = [lin for lin in layer.linears if adapted(lin, targets) and not by_parameter(lin)]
        saved.append(LORA_A_OUT(T, x.lora_rank, len(adapters), n.adapter_compute))
        ahead = layer.attention_inputs if frozen_input else ()  # (their lora_A's, not kept)
        if n.adapter_copies:  # cached low-precision copies of the trainable adapter weights
            saved.append(ADAPTER_COPIES(c, x.lora_rank, sum(
                lin.local_shape(tp)[0] if lin in ahead else sum(lin.local_shape(tp))
                for lin in adapters)))
    # autocast's copies of the weights after the attention core (the output projection's and
    # the MLP's), and of the MLP's alone
    copies_after = mlp_copies = 0
    if n.weight_copies and not x.qlora:  # not the routed experts: grouped_mm is not autocast
        unread = layer.attention_inputs if frozen_input else ()
        saved.append(WEIGHT_COPIES(c, sum(lin.local_counts(tp, x.ep)[0] for lin in layer.linears
                                          if lin.group != "experts" and lin not in unread)))
        for lin in after_attention(layer):
            copy = c * lin.local_counts(tp, x.ep)[0]
            copies_after += copy
            mlp_copies += copy if lin.group != "attention" else 0
    # --- transients --------------------------------------------------------------------------
    f_w = layer.widest_row_input // tp
    # three MLP-wide gradients (the down projection's input's, the gating product's two),
    # beside the saved ones less `last_input`; an adapter's kept input is freed too (n_x = 2
    # stands for it, traced)
    n_x = 3 if not x.lora or bare else 2
    gated_qlora = x.qlora and not layer.moe and arch.traits.mlp == "gated"
    mlp_bwd = qlora_mlp_backward(x, mlp, w_m, f_w) if gated_qlora \
        else BACKWARD_TRANSIENT(n_x, T, f_w, c, x.h, r)
    dequant = dequant_forward(x, mlp, saved, w_m, f_w, z_width) if gated_qlora else None
    after = values = 0
    at_softmax: Term | None = None
    at_softmax_bwd: Term | None = None
    if math or (x.eager and not x.selective_attention):
        # the softmax's backward runs after the MLP's, whose activations it has freed, in a
        # recomputed layer too (traced: Phi-3 with LoRA, checkpointed, +6.1% counted beside
        # them; held out -0.45 .. +1.42%)
        bwd = mlp_bwd
        softmax = attention_backward(x, sliding)
        # freed by then: the MLP's and what the norms after the attention keep (all but the
        # input norm's, which keeps nothing where the layer's input needs no gradient)
        input_norm = sum(t.bytes for t in saved[:pre_norms]) // 2 if times == 2 else 0
        after = sum(t.bytes for t in saved[:norms]) - input_norm + sum(
            t.bytes for t in saved if t.key == "activations/mlp")
        if not math:  # and the output projection's input (or its adapter's), and the values
            # the probabilities multiply (the math kernel's, in fp32: not traced)
            after += sum(t.bytes for t in saved if t.formula is EAGER_OUT) + out_kept
            values = T * a * _values_width(x) * c
        # (and autocast's copies of the MLP's weights and the output projection's, whose
        # backward ran before: `copies_after`)
        if softmax is not None:
            at_softmax_bwd = ATTENTION_BACKWARD_LAYER(softmax.bytes, after + copies_after + values)
            if at_softmax_bwd.bytes > bwd.bytes:
                bwd = at_softmax_bwd
        # at the softmax, what the layer saves after it is not built yet
        fwd = FORWARD_TRANSIENT_EAGER(T, x.H, x.h, r, x.b, a, x.s, 8, 4, 0, 0, 0) if math \
            else FORWARD_TRANSIENT_SINKS(T, x.H, x.h, r, x.b, a, x.s, mask_width(x),
                                         sink_cast(x)) if arch.traits.sinks \
            else FORWARD_TRANSIENT_EAGER(T, x.H, x.h, r, x.b, a, x.s, mask_width(x), c,
                                         softmax_copy(x), cast_beside(x), after + copies_after)
        at_softmax = fwd if fwd.formula is FORWARD_TRANSIENT_EAGER else None
    else:
        fwd = FORWARD_TRANSIENT(T, x.H, x.h, r)
        bwd = mlp_bwd
        ring = ring_attention_backward(x)
        if ring is not None:  # freed by then as above (the kernel reads its own saved tensors)
            input_norm = sum(t.bytes for t in saved[:pre_norms]) // 2 if times == 2 else 0
            after = sum(t.bytes for t in saved[:norms]) - input_norm + sum(
                t.bytes for t in saved if t.key == "activations/mlp")
            if ring.bytes - after > bwd.bytes:
                bwd = ATTENTION_BACKWARD_LAYER(ring.bytes, after)
    if dequant is not None and dequant.bytes > fwd.bytes:
        fwd = dequant
    if layer.moe and lora_experts(x, layer):
        bwd = EXPERT_WEIGHT_GRAD(bwd.bytes, sum(lin.local_counts(tp, x.ep)[0] for lin in
                                                layer.linears
                                                if lin.group == "experts" and lin.tp == "row"),
                                 n.gathered_weight if n.fsdp_mixed else n.weight)
    # the experts' combine runs first in the layer's backward, alone, and last in its
    # forward; under EP the combine runs through the all-to-all instead, which these sums do
    # not describe
    if layer.moe and x.ep == 1:
        combine = experts_combine(x)
        if combine.bytes > bwd.bytes:
            bwd = combine
        combine = EXPERTS_COMBINE_FORWARD(x.routed, x.H, routing_width(x),
                                          int(not (trainable or lora_experts(x, layer))),
                                          expert_width(x), T, x.h, r)
        if combine.bytes > fwd.bytes:
            fwd = combine
    if targets and _adapter_copies(x, drop):
        widest = max((lin for lin in layer.linears
                      if adapted(lin, targets) and not by_parameter(lin)),
                     key=lambda lin: lin.local_shape(tp)[1])
        adapted_out, adapted_in = widest.local_shape(tp)
        # under autocast lora_A keeps its cast: peft's copy and the dropout's output are
        # transient (under DeepSpeed's ZeRO-3 linear the cast is, the output kept), unless the
        # output is in the compute dtype already and no cast is made (FSDP2's mixed
        # precision): lora_A keeps the output itself, saved with the layer, unless per-op
        # selective checkpointing drops it; without autocast lora_A keeps the dropout's output
        # (or the copy), the copy then transient beside it
        p = peft_input(x, c, drop)
        q_c, q_d = (p.copy, p.cast if drop and x.frozen_linear_inputs else
                    p.dropped if p.cast or x.selective_ops else 0) \
            if n.autocast else (0, p.copy if drop else 0)
        # the frozen projection's output: bitsandbytes' in its input's width (QLoRA)
        c_o = projection_width(x, w_m if widest is layer.linears[-1] else z_width) \
            if widest.group != "attention" else c
        lora_fwd = LORA_FORWARD_TRANSIENT(T, adapted_in, c, q_c, q_d, adapted_out, c_o,
                                          n.adapter_compute, x.h, r)
        if lora_fwd.bytes > fwd.bytes:
            fwd = lora_fwd
    checkpointed_fwd = checkpointed_mlp(x, layer, z_width, w_m) if not layer.moe \
        and arch.traits.mlp == "gated" and len(layer.mlp_inputs) == 2 \
        and (tp == 1 or not x.sequence_parallel) else None
    if layer.moe and tp == 1 and x.ep == 1:
        widths = (x.routed, x.H, routing_width(x), expert_width(x), T, x.h, z_width, r)
        # LoRA on the routed experts: their folded weights, built in forward, beside it
        folds = [t.values for t in saved if t.formula is EXPERT_WEIGHTS]
        combine_fwd = CHECKPOINTED_MOE_FOLDED(*widths, *folds[0]) if folds \
            else CHECKPOINTED_MOE(*widths)
        checkpointed_fwd = max(combine_fwd, fwd, key=lambda t: t.bytes)
    if x.selective_ops:
        kept, overlap, kept_after, saved_after = _sac_outputs(x, layer, math)
        return layer_activations(tuple(saved), fwd, bwd, SELECTIVE_KEPT(T, x.h, r, kept),
                                 x.lora, overlap, last_input, kept,
                                 (after, copies_after, kept_after, saved_after, values),
                                 checkpointed_fwd, before, at_softmax, mlp_bwd, mlp_copies,
                                 shared_after_experts=shared_after_experts,
                                 input_norm=input_norm)
    return layer_activations(tuple(saved), fwd, bwd, CHECKPOINT_INPUT(T, x.h, r), x.lora,
                             last_input=last_input,
                             after_softmax=(after, copies_after, 0, 0, values),
                             checkpointed_forward=checkpointed_fwd, before_recompute=before,
                             softmax_forward=at_softmax, mlp_backward=mlp_bwd,
                             mlp_copies=mlp_copies, recompute_forward=recompute_fwd,
                             softmax_backward=at_softmax_bwd,
                             shared_after_experts=shared_after_experts, input_norm=input_norm)


class PeftInput(NamedTuple):
    """What peft's LoRA forward makes of an adapter's input, in bytes per element (0: none):
    its cast to the adapter's dtype (`copy`), lora_dropout's output (`dropped`, of the copy or
    of the input itself) and autocast's cast of lora_A's input to the compute dtype (`cast`)."""

    copy: int
    dropped: int
    cast: int


def peft_input(x: Setup, width: int, dropout: float) -> PeftInput:
    """`PeftInput` for an input `width` bytes wide. peft casts x to lora_A's dtype: fp32
    adapters, the compute dtype where FSDP2 gathers them so; bitsandbytes' layer (QLoRA) casts
    nothing under autocast. Autocast then casts lora_A's input where it is wider."""
    n = x.n
    weight = n.compute if n.fsdp_mixed else n.adapter
    copy = 0 if (x.qlora and n.autocast) or width == weight else weight
    given = copy or width
    return PeftInput(copy, given if dropout else 0,
                     n.compute if n.autocast and given != n.compute else 0)


def checkpointed_mlp(x: Setup, layer: LayerParams, z_width: int, w_m: int) -> Term:
    """A checkpointed dense layer's forward at its gated MLP (`CHECKPOINTED_MLP`), its gate
    and up projections apart (not Phi-3's fused one), on one GPU or under tensor parallelism
    without sequence parallelism: its input `z_width` bytes wide, its gating product `w_m`."""
    n = x.n
    gate, up, down = (lin for lin in layer.linears if lin.group == "mlp")
    u_g = int(adapted(gate, x.lora_targets) or adapted(up, x.lora_targets))
    u_d = int(adapted(down, x.lora_targets))
    into_down = peft_input(x, w_m, x.lora_dropout)
    W_q = down.local_counts(x.tp, x.ep)[0] if x.qlora else 0  # dequantised by bitsandbytes
    W_c = down.local_counts(x.tp, x.ep)[0] if n.weight_copies and not x.qlora else 0
    return CHECKPOINTED_MLP(x.T, down.local_shape(x.tp)[1], x.h, z_width, n.residual, w_m,
                            n.compute, n.adapter_compute, W_q, W_c, u_g,
                            peft_input(x, z_width, 0).copy, u_d, into_down.copy,
                            into_down.dropped, into_down.cast, int(x.tp > 1))


def before_attention_core(layer: LayerParams) -> list[Linear]:
    """The projections a layer runs before its attention core (all its attention's but the
    output projection), in order."""
    return [lin for lin in layer.linears if lin.group == "attention"][:-1]


def after_attention(layer: LayerParams) -> list[Linear]:
    """The linears a layer runs after its attention core (the output projection and the MLP's,
    not routed experts), in order."""
    before = before_attention_core(layer)
    return [lin for lin in layer.linears
            if lin.group != "experts" and not any(lin is b for b in before)]


# Projections whose output the normal graph saves as it is (so an output the selective policy
# keeps is no extra memory at recompute): v goes to the attention kernel unrotated, a fused qkv
# output stays alive beside the rotated q and k, an MLP's first projections feed the
# activation or the gating product; with no rotary, q and k go to the kernel as they are too.
_OUTPUT_SAVED = frozenset({"v_proj", "qkv_proj", "c_attn", "query_key_value", "Wqkv",
                           "gate_proj", "up_proj", "gate_up_proj", "c_fc", "fc1", "w1", "w3",
                           "dense_h_to_4h"})


def _sac_outputs(x: Setup, layer: LayerParams, math: bool) -> tuple[int, int, int, int]:
    """(bytes, bytes also saved by the normal graph, bytes made after the attention's softmax,
    of those the bytes the normal graph saves too) of the outputs torchtitan's per-op policy
    keeps in one layer. In forward order, a biased
    projection runs addmm (always saved), an unbiased one mm (saved every other time, counted
    per layer), the routed experts aten._grouped_mm (neither saved nor counted); LoRA's lora_A
    and lora_B are two more mm each. The attention kernel's outputs are saved too: flash keeps them
    anyway; eager's two bmm (the scores and the weighted values) are extra, and the math
    kernel's (`math`: the layer runs it; Gemma 3's masked sliding layers before sm80 run the
    memory-efficient kernel instead, traced)."""
    T, c, tp = x.T, x.n.compute, x.tp
    rank, targets = x.lora_rank, x.lora_targets
    no_rotary = x.arch.traits.rotary == "none"
    kept = overlap = after = after_saved = count = 0
    late = after_attention(layer)
    for lin in layer.linears:
        if lin.group == "experts":  # transformers' grouped_mm: not on the policy's list (a
            continue  # compute-intensive op it saves), and not an mm it counts
        out = T * lin.local_shape(tp)[0] * c * lin.copies
        runs = [(out, lin.bias, lin.name in _OUTPUT_SAVED or (no_rotary and lin.name in
                                                              ("q_proj", "k_proj")))]
        if adapted(lin, targets) and not by_parameter(lin):  # (a folded adapter runs no mm)
            a_width = x.n.adapter_compute
            runs += [(T * rank * a_width, False, True),  # lora_A's output, kept by lora_B
                     (T * lin.local_shape(tp)[0] * a_width, False, False)]
        for nbytes, biased, in_saved in runs:
            if not biased:
                count += 1
                if count % 2 == 0:
                    continue
            kept += nbytes
            overlap += nbytes if in_saved else 0
            if lin in late:
                after += nbytes
                after_saved += nbytes if in_saved else 0
    if x.eager or math:  # (the math kernel's bmm outputs in fp32)
        w = 4 if math else c
        kept += x.b * x.a * x.s**2 * w + T * x.a * x.d * w
        after += T * x.a * x.d * w  # (the weighted values)
    else:  # flash / memory-efficient: the output and the log-sum-exp, saved anyway
        flash = T * x.a * x.d * c + T * x.a * 4
        kept += flash
        overlap += flash
    return kept, overlap, after, after_saved


def mask_width(x: Setup) -> int:
    """HF builds the additive 4-D mask in the embeddings' dtype: fp32 under autocast."""
    return x.n.residual


def _scores_width(x: Setup) -> int:
    """Bytes an element of the scores eager attention's softmax is given: the mask added to them
    widens them to its own width."""
    return max(mask_width(x), x.n.compute)


def half_to_float(x: Setup) -> bool:
    """Whether eager attention's softmax(dtype=float32) takes its fp16 scores as they are (CUDA's
    half-to-float kernel: ATen converts bf16 first; autocast's own cast, where the model does not
    ask for float32, is a copy in both)."""
    return x.arch.traits.softmax_upcast and x.fp16 and _scores_width(x) == 2


def softmax_copy(x: Setup) -> int:
    """Bytes an element of eager attention's fp32 copy of its 16-bit softmax input, beside the
    output until the kernel returns: none where the scores are fp32 (the mask's width), the
    softmax stays in their dtype or takes them as they are (`half_to_float`)."""
    if _scores_width(x) == 4 or not (x.arch.traits.softmax_upcast or x.n.autocast_ops) \
            or half_to_float(x):
        return 0
    return 4


def cast_beside(x: Setup) -> int:
    """Bytes an element of eager attention's masked scores still referenced as the softmax's
    output is cast to the queries' dtype (HF's `softmax(...).to(query.dtype)`): a 16-bit model's
    (under amp the queries come out of the rotary embedding in fp32, and nothing is cast)."""
    m = mask_width(x)
    return m if m == x.n.compute < 4 else 0  # (an fp32 model casts nothing)


def sink_cast(x: Setup) -> int:
    """Bytes of eager attention's cast of the probabilities to the values' dtype with sinks:
    GPT-OSS softmaxes in the scores' dtype, the mask's once it is added, and casts back."""
    m = mask_width(x)
    return x.n.compute if m != x.n.compute else 0


def _values_width(x: Setup) -> int:
    """A head's values' width: MLA's v_head_dim, else the head size."""
    return x.arch.v_head_dim if x.arch.is_mla and x.arch.v_head_dim else x.d


def attention_backward(x: Setup, sliding: bool = False) -> Term | None:
    """The attention's backward transient through its softmax (the late moment of a layer's
    backward, its MLP done), where the attention is eager or SDPA's math kernel (not on a
    `sliding` layer masked under SDPA, which runs the memory-efficient kernel)."""
    if x.selective_attention or x.megatron:  # (the attention core recomputed: not kept)
        return None
    if x.math_attention and not sliding:
        return ATTENTION_BACKWARD_MATH(x.b, x.a, x.s)
    if not x.eager:
        return ring_attention_backward(x)
    if x.arch.traits.sinks:
        return ATTENTION_BACKWARD_SINKS(x.b, x.a, x.s, mask_width(x), sink_cast(x), x.T, x.h,
                                        x.n.residual, x.d, x.n.compute)
    return ATTENTION_BACKWARD_EAGER(x.b, x.a, x.s, x.n.compute, x.T, x.h, x.n.residual,
                                    _values_width(x), x.n.compute if half_to_float(x) else 4)


def ring_attention_backward(x: Setup) -> Term | None:
    """Context parallelism's ring-attention backward (`RING_ATTENTION_BACKWARD`), its keys and
    values as SDPA receives them: MLA's, every head its own, d_qk wide; GQA's key/value heads
    (transformers passes them unrepeated, `enable_gqa`, where no mask is given). None without
    cp."""
    arch = x.arch
    if x.cp == 1:
        return None
    if arch.is_mla:
        if not arch.qk_nope_head_dim or not arch.qk_rope_head_dim:
            return None
        d_qk, heads = arch.qk_nope_head_dim + arch.qk_rope_head_dim, x.a
    else:
        d_qk, heads = x.d, x.k
    d_v = _values_width(x)
    return RING_ATTENTION_BACKWARD(x.T * x.a * d_qk, x.T * heads * (d_qk + d_v), x.n.compute,
                                   x.cp)


def forward_mask(x: Setup) -> Term | None:
    """The (b, 1, s, s) additive causal mask of the eager path, or under SDPA a padded
    batch's boolean one, or the sliding window's, alive for the whole forward."""
    if x.padded_sdpa:
        return PADDING_MASK(x.b, x.s, x.arch.mask_kinds)
    if x.sliding_sdpa:
        return SLIDING_MASK(x.s)
    if not x.eager or x.megatron:
        return None
    return EAGER_MASK(x.b, x.s, mask_width(x), x.arch.mask_kinds)


_NORMS = (NORM_INPUT, NORM_STATS, NORM_FP32_COPY, NORM_RSQRT, NORM_OUT_FP32, NORM_OUT)


def _norm(x: Setup, saved: list[Term], trainable: bool, times: int,
          formulas: tuple[Formula, ...] = _NORMS) -> int:
    """Save what `times` pre-norms keep; return the width of their output. A frozen norm
    weight (LoRA) needs no normalised tensor: `weight * y` keeps `y` only for its gradient.
    `formulas`: the norm formulas, or their twins booked elsewhere (the head's)."""
    n, T, h = x.n, x.T, x.h
    res = n.residual
    f_input, f_stats, f_copy, f_rsqrt, f_out_fp32, f_out = formulas
    if x.arch.traits.norm_upcast == "native":  # nn.LayerNorm; autocast runs it in fp32
        # its input: the residual itself, or under autocast the fp32 copy autocast made of it
        saved += [f_input(T, h, 4 if n.autocast_ops else res), f_stats(T)] * times
        return norm_width(x)
    # RMSNorm with an fp32 upcast (Llama-style and Gemma-style): its fp32 input (the fp32
    # residual itself, or a copy of a low-precision one) and rsqrt(variance)
    terms = [f_input(T, h, 4) if res == 4 else f_copy(T, h), f_rsqrt(T)]
    if not trainable:
        pass
    elif _normalised_fp32(x, res):
        terms.append(f_out_fp32(T, h))
    else:
        terms.append(f_out(T, h, res))
    saved += terms * times
    return norm_width(x)


def down_adapter_forward(x: Setup, layer: LayerParams, adapter: bool) -> Term:
    """The dense `layer`'s down projection in forward where its adapter is about to run
    (`adapter`: lora_A or lora_B), or before its base layer has (`DOWN_ADAPTER_FORWARD`): its
    input counts where the layer's saved tensors do not hold it as it is (QLoRA with
    lora_dropout), in place of the adapter's copy and mask before they are made."""
    down = [lin for lin in layer.linears if lin.group == "mlp"][-1]
    w = projection_width(x, norm_width(x))  # the gating product's
    copies = adapted(down, x.lora_targets) and _adapter_copies(x, x.lora_dropout, w)
    made = lora_a_kept(x, w, x.lora_dropout) + int(bool(x.lora_dropout)) if copies else 0
    return DOWN_ADAPTER_FORWARD(x.T, x.h, projection_width(x, w) if adapter else 0,
                                down.in_features // x.tp, w, int(x.qlora and copies),
                                peft_input(x, w, x.lora_dropout).copy if adapter else 0,
                                0 if adapter else made)


def norm_width(x: Setup) -> int:
    """Bytes of a norm's output: LayerNorm's fp32 under autocast, Gemma's the residual's,
    Llama's fp32 with an fp32 residual, else the compute dtype."""
    n, res = x.n, x.n.residual
    kind = x.arch.traits.norm_upcast
    if kind == "native":
        return 4 if n.autocast_ops else res
    return res if kind == "gemma" else (4 if res == 4 else n.compute)


def _normalised_fp32(x: Setup, width: int) -> bool:
    """Whether an RMSNorm of an input `width` bytes wide keeps its normalised tensor in fp32
    for its weight's gradient: Gemma's scales in fp32 (`(1 + w.float())`), Llama's casts back
    to the input's dtype first."""
    return x.arch.traits.norm_upcast in ("gemma", "fp32_weight") or width == 4


_MLP_KEYED = {f: f.booked("activations/mlp") for f in (INPUT_CASTS, INPUT, ADAPTER_INPUT)}


def _linear_inputs(x: Setup, saved: list[Term], key: str, consumers: tuple[Linear, ...],
                   z_width: int, keeps: bool, dropout: float = 0.0) -> None:
    """Inputs of the projections that read one normed tensor (booked under `key`); `keeps`:
    the projections themselves keep it (their weights train, or DeepSpeed's ZeRO-3 linear)."""
    if not consumers:
        return
    n = x.n

    def f(formula: Formula) -> Formula:
        return formula if key == "attention" else _MLP_KEYED[formula]

    if keeps:
        if x.frozen_linear_inputs:  # DeepSpeed's ZeRO-3 linear casts inside: x as given
            saved.append(f(INPUT)(x.T, x.H, z_width, z_width))
        elif n.autocast and z_width != n.compute:
            saved.append(f(INPUT_CASTS)(len(consumers), x.T, x.H, n.linear_input))
        else:
            saved.append(f(INPUT)(x.T, x.H, n.linear_input, z_width))
    n_adapted = sum(adapted(lin, x.lora_targets) for lin in consumers)
    if n_adapted and not _adapter_copies(x, dropout, z_width):  # the adapters share x itself
        if not keeps:  # (kept once, by the projections)
            _adapter_input(x, saved, key, x.H, dropout, z_width, shared=True)
    else:
        for _ in range(n_adapted):
            _adapter_input(x, saved, key, x.H, dropout, z_width)


def _adapter_copies(x: Setup, dropout: float, width: int = 0) -> bool:
    """Whether each LoRA adapter keeps its own copy of its input (`width` bytes wide, where
    it can differ from the compute dtype's). peft casts x to the adapter dtype (fp32,
    `autocast_adapter_dtype`) and lora_A keeps that fp32 copy; under autocast lora_A casts it
    back down and keeps the low-precision cast instead (traced: on o_proj this copy sits
    beside SDPA's saved output). lora_dropout makes a copy per adapter too. x itself is kept,
    once for every adapter reading it, when it already has the adapter's dtype (pure fp32,
    FSDP2 gathering the adapters in the compute dtype, DeepSpeed's engine casting them to it)
    or when peft's bitsandbytes layer (QLoRA) runs under autocast: it casts x only without
    autocast, so x reaches lora_A as it is, and autocast casts it there, per adapter, where it
    is wider than the compute dtype (an fp32 norm's output over an fp32 base)."""
    n = x.n
    if x.frozen_linear_inputs:  # lora_A, DeepSpeed's ZeRO-3 linear, keeps x as given,
        # autocast casting it inside: a copy only where the dropout makes one, or where peft
        # casts x to the adapter's dtype (bitsandbytes' QLoRA layer casts nothing)
        return bool(dropout) or (not x.qlora and (width or n.compute) != n.adapter)
    if x.qlora and n.autocast and not dropout:
        return width not in (0, n.compute)
    return bool(dropout) or not (n.fsdp_mixed or n.compute == n.adapter)


def dequant_forward(x: Setup, mlp: list[Linear], saved: list[Term], w: int, f_w: int,
                    z_width: int) -> Term:
    """A QLoRA layer's down projection (the last of its `mlp` projections) in forward
    (`DEQUANT_FORWARD`): its input, `w` bytes wide, counts where no adapter keeps it as it
    is; an adapter's own copy of it (in `saved`) comes after. The MLP's input, `z_width` wide,
    counts where its adapters do not keep it."""
    c = x.n.compute
    down = mlp[-1]
    copies = _adapter_copies(x, x.lora_dropout, w)
    adapter = lora_a_kept(x, w, x.lora_dropout) if adapted(down, x.lora_targets) else 0
    c_d = (w if copies or not adapter else 0) + (c if w != c else 0) - (adapter if copies else 0)
    shared = any(adapted(lin, x.lora_targets) for lin in mlp[:-1]) and not _adapter_copies(
        x, x.lora_dropout, z_width)
    return DEQUANT_FORWARD(x.T, f_w, c_d, down.local_counts(x.tp, x.ep)[0], c, x.h,
                           0 if _norms_keep_residual(saved) else 2, x.n.residual,
                           0 if shared else z_width)


def dequant_recompute(x: Setup, mlp: list[Linear], saved: list[Term], z_width: int) -> Term:
    """A checkpointed QLoRA layer's recomputation, stopped before its bare down projection
    (`DEQUANT_RECOMPUTE`): the up projection (the second of the gated `mlp`'s three)
    dequantised beside the MLP's input, `z_width` wide (no adapter keeps it: the MLP has
    none), and the residual after attention where the norms do not keep it."""
    return DEQUANT_RECOMPUTE(mlp[1].local_counts(x.tp, x.ep)[0], x.n.compute, x.T, x.h,
                             0 if _norms_keep_residual(saved) else 1, x.n.residual, z_width)


def _norms_keep_residual(saved: list[Term]) -> bool:
    """Whether the layer's norms keep the residual (their saved input), so that a transient
    beside them does not count it again."""
    return any(t.key == "activations/residual" for t in saved)


def qlora_mlp_backward(x: Setup, mlp: list[Linear], w: int, f_w: int) -> Term:
    """The widest backward moment of a dense QLoRA layer's MLP, `w` bytes wide
    (`QLORA_MLP_BACKWARD`), or its down projection's (the last of `mlp`) dequantised weight
    beside the gradients (`DEQUANT_BACKWARD`), the larger."""
    n, T, c = x.n, x.T, x.n.compute
    down = mlp[-1]
    u_d, q_a = int(adapted(down, x.lora_targets)), lora_a_kept(x, w, x.lora_dropout)
    cast = c if w != c else 0  # bitsandbytes' cast of a wider input to the compute dtype
    moment = QLORA_MLP_BACKWARD(T, f_w, w, u_d, q_a, x.h, n.residual, c)
    dequant = DEQUANT_BACKWARD(T, x.h, max(n.residual, c) + cast, f_w, u_d, w, q_a, c,
                               down.local_counts(x.tp, x.ep)[0])
    return max(moment, dequant, key=lambda t: t.bytes)


def projection_width(x: Setup, width: int) -> int:
    """Bytes of what a frozen projection returns for an input `width` bytes wide:
    bitsandbytes' 4-bit layer computes in the compute dtype and casts its output back to its
    input's (QLoRA: fp32 after an fp32 norm, under amp); a matmul gives the compute dtype."""
    return width if x.qlora else x.n.compute


def lora_a_kept(x: Setup, given: int, dropout: float) -> int:
    """Bytes per element lora_A keeps of its own copy of an input `given` bytes wide: its
    autocast cast, in the adapter's compute dtype; DeepSpeed's ZeRO-3 linear keeps the
    dropout's output as it is given, autocast casting it inside (traced: LoRA and QLoRA under
    torch_autocast, the dropout's output in fp32)."""
    if x.frozen_linear_inputs:
        return peft_input(x, given, dropout).dropped if dropout else x.n.adapter
    return x.n.adapter_compute


def _adapter_input(x: Setup, saved: list[Term], key: str, width: int, dropout: float,
                   given: int, shared: bool = False) -> None:
    """What one LoRA adapter keeps of its input, x, `given` bytes wide (see
    `_adapter_copies`); `shared`: the adapters keep x itself rather than a copy."""
    formula = ADAPTER_INPUT if key == "attention" else _MLP_KEYED[ADAPTER_INPUT]
    width_kept = given if shared else lora_a_kept(x, given, dropout)
    saved.append(formula(x.T, width, width_kept))
    if dropout:
        saved.append(ADAPTER_DROPOUT(x.T, width))


def expert_width(x: Setup) -> int:
    """Bytes of the routed experts' activations: transformers runs them as one grouped GEMM
    (torch._grouped_mm), which autocast does not cast, so under amp they compute in the fp32
    weights' dtype (traced: validation/cases.json, Mixtral, Qwen3-MoE, DeepSeek-V3)."""
    return x.n.weight if x.n.autocast else x.n.compute


def _mlp_core(x: Setup, saved: list[Term], tokens: int, f: int, down_input: bool = True,
              width: int | None = None) -> None:
    c = width or x.n.compute
    if x.arch.traits.mlp == "gated":
        saved.append(MLP_GATED(4 if down_input else 3, tokens, f, c))
    elif ACTIVATIONS[x.arch.hidden_act] == "native":
        saved.append(MLP_NATIVE(tokens, f, c, int(down_input)))
    elif x.n.autocast_ops:
        saved.append(MLP_GELU_AMP(tokens, f, c, int(down_input)))
    else:
        saved.append(MLP_GELU(tokens, f, c, int(down_input)))


def experts_combine(x: Setup) -> Term:
    """A MoE layer's combine backward (`EXPERTS_COMBINE_BACKWARD`): the routing weights fp32
    where the family keeps them so, the experts' output gradient cast back where it differs."""
    w_e = expert_width(x)
    w_c = routing_width(x)
    return EXPERTS_COMBINE_BACKWARD(x.routed, x.H, w_c, w_e if w_e != w_c else 0, x.T, x.h,
                                    x.n.residual, x.n.compute)


def routing_width(x: Setup) -> int:
    """Bytes of the experts' outputs weighted by their routing weights: fp32 where the family
    keeps the weights so (Mixtral's softmax in fp32), unless the router's fp32 is its own
    cast of a linear's inputs (DeepSeek-V3), which autocast overrides (traced: the weighted
    outputs in the compute dtype under autocast and under FSDP2's amp, which runs it too)."""
    traits = x.arch.traits
    if not traits.routing_fp32 or (traits.router_fp32 and x.n.autocast_ops):
        return expert_width(x)
    return 4


def lora_experts(x: Setup, layer: LayerParams) -> bool:
    """Whether LoRA adapts the layer's routed experts (peft's `ParamWrapper`, `all-linear`)."""
    return "experts" in x.lora_targets and any(lin.group == "experts" for lin in layer.linears)


def _moe(x: Setup, layer: LayerParams, saved: list[Term], z_width: int, trainable: bool) -> int:
    """Routed experts: each token visits top-k experts (Mixtral-style dispatch). Frozen
    experts and router (LoRA on other projections) keep neither the router's input nor the
    experts' gathered inputs nor the down projections' inputs; LoRA on them (peft's
    `ParamWrapper`) keeps what full training keeps and the folded weights besides. Returns
    the bytes of a shared expert computed before the routed experts (Qwen2-MoE's: its
    backward runs after theirs, `LayerActivations.shared_after_experts`), else 0."""
    arch, n, T = x.arch, x.n, x.T
    routed = [lin for lin in layer.linears if lin.group == "experts"]
    experts_train = trainable or lora_experts(x, layer)
    if trainable or "router" in x.lora_targets:  # (autocast casts an fp32 router input down)
        saved.append(ROUTER_INPUT(T, x.H, n.linear_input if n.autocast else
                                  4 if arch.traits.router_fp32 else z_width))
    if arch.traits.router_top_k:
        saved.append(ROUTER_TOP_K(T, arch.num_experts_per_tok, n.compute))
    else:
        saved.append(ROUTER_SOFTMAX(T, arch.num_local_experts))
    saved.append(EXPERT_IO(x.routed, x.H, expert_width(x), 2 if experts_train else 1))
    f = arch.expert_intermediate_size // x.tp
    if arch.traits.clamped_glu:
        saved.append(CLAMPED_GLU(7 if experts_train else 6, x.routed, f, expert_width(x)))
    else:
        _mlp_core(x, saved, x.routed, f, experts_train, expert_width(x))
    if experts_train and not trainable:
        # folded in the weights' dtype as the GEMM reads them: FSDP2's mixed-precision policy
        # gathers weights and factors alike in the compute dtype (no cast to fold)
        saved.append(EXPERT_WEIGHTS(sum(lin.local_counts(x.tp, x.ep)[0] for lin in routed),
                                    n.gathered_weight if n.fsdp_mixed else n.weight))
        if n.adapter != n.weight and not n.fsdp_mixed:  # fp32 factors (peft's
            # autocast_adapter_dtype) cast for the fold; DeepSpeed's engine keeps them in the
            # weights' dtype already
            saved.append(EXPERT_ADAPTER_COPIES(
                sum(m * k for lin in routed for m, k in adapter_shapes(
                    lin, x.lora_rank, x.tp, x.ep)), n.weight))
    routed_end = len(saved)
    if arch.shared_expert_intermediate_size:  # (Qwen2-MoE's gate reads x like them)
        shared = tuple(lin for lin in layer.linears if lin.name == "shared_expert_gate" or
                       (lin.group == "shared_expert" and lin.tp != "row"))
        _linear_inputs(x, saved, "mlp", shared, z_width, trainable)
        down = next(lin for lin in layer.linears
                    if lin.group == "shared_expert" and lin.tp == "row")
        # (bitsandbytes' 4-bit projections return their input's width, as the dense MLP's)
        _mlp_core(x, saved, T, arch.shared_expert_intermediate_size // x.tp,
                  trainable or adapted(down, x.lora_targets), projection_width(x, z_width))
    if arch.traits.shared_expert_gate:
        saved.append(SHARED_GATE(T, x.H, projection_width(x, z_width)))
        # transformers' Qwen2-MoE runs the shared expert first and gates it last: the routed
        # experts' backward comes between (traced: random run 780/9, FSDP2 x EP2)
        return sum(t.bytes for t in saved[routed_end:] if t.formula is not SHARED_GATE)
    return 0


def head_activations(x: Setup) -> tuple[Term, ...]:
    """The final norm and the lm_head's saved input (and its autocast weight copy)."""
    saved: list[Term] = []
    z_width = _norm(x, saved, not x.lora, 1, HEAD_NORMS)
    if x.chunked_loss:
        return tuple(saved)  # the fused kernel keeps gradients instead (see logits.py)
    n = x.n
    if x.frozen_linear_inputs:  # DeepSpeed's ZeRO-3 linear keeps its input as given
        saved.append(HEAD_INPUT(x.T, x.H, z_width))
    elif not x.lora:
        saved.append(HEAD_INPUT(x.T, x.H, n.linear_input if n.autocast
                             else min(z_width, n.linear_input)))
    if n.weight_copies and not x.megatron:
        saved.append(HEAD_COPY(x.vocab, x.H, n.compute))
    return tuple(saved)


def held_embedding(x: Setup, first: LayerActivations, checkpointed: bool) -> Term | None:
    """The embedding's output the model's forward holds through its layers (transformers'
    `inputs_embeds`), beyond what the first layer keeps: its input where it needs a gradient
    and a norm keeps the residual itself (or where checkpointing keeps the layer's input),
    unless the model scales the embeddings (Gemma) or adds learned positions (GPT-2) first,
    making the layer's input a tensor of its own (traced: QLoRA in bf16 at its forward peak,
    the embedding output and the rotary tables beside the layers')."""
    traits = x.arch.traits
    own_input = traits.embed_scale or traits.learned_positions
    kept = checkpointed or (first.saves_residual and not x.lora)
    if x.megatron or x.pp > 1 or (kept and not own_input):
        return None
    return EMBEDDING_HELD(x.b, x.s, x.h, x.n.residual, int(traits.learned_positions))


def norm_forward(x: Setup) -> Term:
    """A frozen RMSNorm's forward at its weight multiply (`NORM_FORWARD`)."""
    r = x.n.residual
    return NORM_FORWARD(x.T, x.h, 0 if r == 4 else r, norm_width(x))


def final_hidden(x: Setup) -> Term | None:
    """The final norm's output at the loss, where it is not the head's saved input itself
    (`FINAL_HIDDEN`): the base model has returned it (its masks freed) and the loss is computed
    beside it (traced: 1-2 x 4K-token amp and LoRA cases, T h z short at the loss)."""
    if x.chunked_loss or x.megatron or x.tp > 1 or x.frozen_linear_inputs:
        return None
    z = norm_width(x)
    n = x.n
    if not x.lora and (n.linear_input if n.autocast else min(z, n.linear_input)) == z:
        return None  # the head keeps the output itself
    return FINAL_HIDDEN(x.T, x.H, z)


def _output_rows(x: Setup, lin: Linear) -> int:
    """A projection's output gradient's width per token (routed experts: their routed rows
    spread over the tokens)."""
    rows = lin.local_shape(x.tp)[0]
    return (rows * x.routed // x.T if x.T else 0) if lin.group == "experts" else rows


def output_grads(x: Setup, layer: LayerParams, received: bool = False,
                 widths: tuple[int, int, int, int] | None = None) -> Term:
    """What one layer's split backward keeps for its weight backward (`OUTPUT_GRADS`): the
    gradient at every trained projection's output and every trained norm's. Routed experts
    count their routed rows. `received`: the layer is the top of a stage that sends its output,
    so its last projection's output gradient is the gradient the stage received (autograd's
    residual add passes it on as it is), counted as the receive buffer. `widths`: of some of
    the layer's parameter groups only, their projections', norms', q/k norms' and routed
    experts' widths."""
    n, T, arch = x.n, x.T, x.arch
    if widths is None:
        trained = [lin for lin in (layer.linears[:-1] if received else layer.linears)
                   if not x.lora or adapted(lin, x.lora_targets)]
        outputs = sum(_output_rows(x, lin) for lin in trained if lin.group != "experts")
        experts = sum(_output_rows(x, lin) for lin in trained if lin.group == "experts")
        norms = 0 if x.lora else arch.traits.norms_per_layer * x.h
        qk = (x.a + x.k) * x.d if arch.traits.qk_norm and not x.lora else 0
    else:
        outputs, norms, qk, experts = widths
    z = 4 if n.residual == 4 or _normalised_fp32(x, 0) else n.compute
    # a q/k norm multiplies its weight as stored (fp32 under amp) into the low-precision heads
    z_qk = max(n.compute, n.gathered_weight if n.fsdp_mixed else n.weight)
    return OUTPUT_GRADS(T, outputs, n.compute, norms, z, qk, z_qk, experts, expert_width(x))


def output_grads_at_softmax(x: Setup, layer: LayerParams, received: bool = False) -> Term:
    """What a split backward's input pass has kept of one layer's output gradients by its eager
    softmax's backward: those of the projections after the attention core (a top layer's last
    one, which the stage received, counted as its receive buffer) and of the norm between
    them (`output_grads`); the projections before the core and the input norm come after."""
    trained = [lin for lin in after_attention(layer)
               if (not x.lora or adapted(lin, x.lora_targets))
               and not (received and lin is layer.linears[-1])]
    outputs = sum(_output_rows(x, lin) for lin in trained if lin.group != "experts")
    experts = sum(_output_rows(x, lin) for lin in trained if lin.group == "experts")
    norms = 0 if x.lora else x.h * max(1, x.arch.traits.norms_per_layer // 2)
    return output_grads(x, layer, widths=(outputs, norms, 0, experts))


class WeightGroup(NamedTuple):
    """One parameter group of a split backward's weight pass (`weight_groups`)."""

    read: int  # the recomputed bytes that only its gradient reads
    width: tuple[int, int, int, int] = (0, 0, 0, 0)  # its output gradient's widths per token
    # (`output_grads`: projections', norms', q/k norms', routed experts')
    grad: int = 0  # its new weight gradient as its node computes it (a projection's in the
    # compute dtype, beside its cast to the weight's where autocast casts the weight; the
    # routed experts' in theirs; a norm's or an adapter's: none counted)
    mlp: bool = False  # one of the MLP's (or MoE block's)
    kept: int = 0  # that gradient as the group hands it on (in the weight's dtype)


class WeightGroups(NamedTuple):
    """A layer's parameter groups as a split backward's weight pass runs them (`weight_groups`)."""

    reads: tuple[int, ...]  # the recomputed bytes that only each group's gradient reads
    widths: tuple[tuple[int, int, int, int], ...]  # its output gradient's widths per token
    last_mlp: int  # the index of the last MLP group (a dense layer's down projection's)
    mlp_unread: int  # the MLP's recomputed bytes that no gradient reads
    grads: tuple[int, ...]  # each group's new weight gradient (`WeightGroup.grad`)
    kept: tuple[int, ...]  # and as it hands it on (`WeightGroup.kept`)


@lru_cache(maxsize=64)  # (a stage's variants ask alike)
def weight_groups(x: Setup, act: LayerActivations, layer: LayerParams,
                  copies: bool) -> WeightGroups:
    """A layer's parameter groups, in the order a split backward's weight pass runs them (the
    module's parameters' order: torch's get_param_groups, a group for each trained parameter
    whose gradient path meets the input's at a node of its own), each with the bytes of the
    layer's recomputed tensors that only its gradient reads; its backward frees them in every
    recomputation holding them (`SPLIT_RECOMPUTED`). `copies`: the recomputation casts the
    weights anew (autocast's cache emptied), each projection's cast read by its own gradient
    (not the routed experts': grouped_mm is not autocast). An input several projections read
    goes with the last of them; SDPA's output, which o_proj reads, its node keeps too; a
    LayerNorm's gradient reads its input and statistics (the first's input is the
    checkpoint's own); the routed experts' gate and up are one parameter, reading the tokens
    gathered for them, their down projection the gating product, and their biases (GPT-OSS)
    groups of their own that read nothing, as GPT-OSS's attention sinks are. With LoRA each
    adapter is two groups: lora_A (what it reads, its input or its own copy of it, is counted
    with what no group reads) and lora_B, reading lora_A's output."""
    n, T, tp = x.n, x.T, x.tp
    by_id: dict[str, list[int]] = {}
    for t in act.saved:
        by_id.setdefault(t.id, []).append(t.bytes)
    read: dict[int, int] = {}  # by the projection's index in layer.linears
    index = {id(lin): i for i, lin in enumerate(layer.linears)}
    lora = bool(x.lora)

    def inputs(consumers: tuple[Linear, ...], suffix: str) -> None:
        casts, shared = by_id.get("act.input_casts" + suffix), by_id.get("act.input" + suffix)
        if casts:  # autocast's cast of the normed tensor, one a projection
            for lin in consumers:
                read[index[id(lin)]] = sum(casts) // len(consumers)
        elif shared and consumers:
            read[index[id(consumers[-1])]] = sum(shared)

    attention = [i for i, lin in enumerate(layer.linears) if lin.group == "attention"]
    ffn = [i for i, lin in enumerate(layer.linears) if lin.group != "attention"]
    routed = [i for i in ffn if layer.linears[i].group == "experts"]
    if not lora:  # (an adapter's lora_A reads its input: counted as what no group reads)
        inputs(layer.attention_inputs, "")
        inputs(tuple(lin for lin in layer.linears if lin.tp != "row" and lin.group == (
            "shared_expert" if layer.moe else "mlp")), "@activations/mlp")
        read[attention[-1]] = sum(by_id.get("act.eager_output", ())) + sum(
            by_id.get("act.transposed_output", ()))
        for i in ffn:
            lin = layer.linears[i]
            if lin.group == "router":
                read[i] = sum(by_id.get("act.router_input", ()))
            elif lin.tp == "row":  # a down projection: the gating product
                tokens = x.routed if lin.group == "experts" else T
                read[i] = read.get(i, 0) + tokens * (lin.in_features // tp) * (
                    expert_width(x) if lin.group == "experts" else n.compute)
        if routed:  # gate and up: one parameter, reading the gathered tokens
            read[routed[0]] = sum(by_id.get("act.expert_io", ())) // 2
    arch = x.arch
    latents = [rank for rank in (arch.q_lora_rank, arch.kv_lora_rank)
               if rank and any(t.id == "act.mla_latent" for t in act.saved)]
    names = ("q_b_proj", "kv_b_proj")[2 - len(latents):]
    for rank, name in zip(latents, names, strict=True):
        read[index[id(dict(layer.by_name)[name])]] = T * rank * n.compute
    mlp_unread = act.mlp_bytes - sum(read.get(i, 0) for i in ffn)

    def fused(i: int) -> int:  # the routed experts' gate and up: one parameter
        return 2 if routed and i == routed[0] and len(routed) > 2 else 1

    def projection(i: int) -> list[WeightGroup]:
        lin = layer.linears[i]
        mlp = lin.group != "attention"
        rows = _output_rows(x, lin) * fused(i)
        if lora:  # lora_A, then lora_B reading lora_A's output
            if not adapted(lin, x.lora_targets) or by_parameter(lin):
                return [WeightGroup(0, mlp=mlp)] * 2 if by_parameter(lin) and adapted(
                    lin, x.lora_targets) else []
            return [WeightGroup(read.get(i, 0), mlp=mlp),
                    WeightGroup(T * x.lora_rank * n.adapter_compute, (rows, 0, 0, 0), mlp=mlp)]
        experts = lin.group == "experts"
        count = lin.local_counts(tp, x.ep)[0]
        cast = count * n.compute if copies and not experts else 0
        grad = kept = count * fused(i) * (expert_width(x) if experts else n.compute)
        if n.weight_copies and not experts:  # the gradient of autocast's cast: cast back to
            # the weight's dtype beside it, which the group hands on
            kept = count * n.grad
            grad += kept
        group = WeightGroup(read.get(i, 0) + cast,
                            (0, 0, 0, rows) if experts else (rows, 0, 0, 0), grad, mlp, kept)
        return [group, WeightGroup(0, mlp=True)] if experts and lin.bias else [group]

    norm = WeightGroup(0, (0, x.h, 0, 0))
    if x.arch.traits.experts_first:
        ffn = [i for i in ffn if i in routed] + [i for i in ffn if i not in routed]
    ffn = [i for i in ffn if i not in routed[1:-1]]  # (fused gate and up)
    if arch.traits.fused_qkv and arch.traits.rotary != "none":  # Phi-3 builds o_proj first
        attention = attention[-1:] + attention[:-1]
    groups: list[WeightGroup] = []
    if arch.traits.norm_upcast == "native":  # LayerNorm: ln_1, attention, ln_2, MLP
        stats, given = by_id.get("act.norm_stats", [0, 0]), by_id.get("act.norm_input", [0, 0])
        trained = not lora
        groups += [norm._replace(read=stats[0])] * trained
        for i in attention:
            groups += projection(i)
        groups += [norm._replace(read=given[-1] + stats[-1])] * trained
        for i in ffn:
            groups += projection(i)
    else:
        c_n = 4 if _normalised_fp32(x, n.compute) else n.compute
        latent = dict(zip(("q_a_proj", "kv_a_proj_with_mqa")[2 - len(latents):], latents,
                          strict=True))
        for i in attention:
            groups += projection(i)
            r_l = latent.get(layer.linears[i].name)
            if r_l and not lora:  # MLA's latent norm after its a-projection, in fp32
                groups.append(WeightGroup(T * r_l * 4, (0, r_l, 0, 0)))
        if not lora and arch.traits.qk_norm:
            groups += [WeightGroup(T * heads * x.d * c_n, (0, 0, heads * x.d, 0))
                       for heads in (x.a, x.k)]
        if not lora and arch.traits.sinks:
            groups.append(WeightGroup(0))
        for i in ffn:
            groups += projection(i)
        if not lora:
            pre = [t.bytes for t in act.saved
                   if t.id in ("act.norm_normalised", "act.norm_normalised_fp32")]
            post = [t.bytes - T * 4 - T * x.h * 4 for t in act.saved if t.id == "act.post_norm"]
            # Gemma's: input, post-attention, pre-feedforward, post-feedforward
            ordered = [b for pair in zip(pre, post, strict=False) for b in pair] + \
                pre[len(post):] if post else pre
            groups += [norm._replace(read=b) for b in ordered]
    last = max((k for k, g in enumerate(groups) if g.mlp), default=len(groups) - 1)
    return WeightGroups(tuple(g.read for g in groups), tuple(g.width for g in groups), last,
                        mlp_unread, tuple(g.grad for g in groups), tuple(g.kept for g in groups))


def head_output_grads(x: Setup) -> Term:
    """The head's output gradients kept for its weight backward (`HEAD_OUTPUT_GRADS`)."""
    n = x.n
    z = 4 if n.residual == 4 or _normalised_fp32(x, 0) else n.compute
    return HEAD_OUTPUT_GRADS(x.T, 0 if x.lora else x.vocab, n.compute, x.H, 0 if x.lora else z)


def _rms_upcasts(x: Setup) -> bool:
    """Whether a norm's backward upcasts to fp32 as Llama's RMSNorm does (transformers' kernels,
    not Megatron-LM's fused ones)."""
    return x.arch.traits.norm_upcast in ("llama", "fp32_weight") and not x.megatron


def head_norm_backward(x: Setup) -> Term | None:
    """The final norm's backward at the start of backward, when it upcasts to fp32 as
    Llama's RMSNorm does (the one moment a norm's fp32 temporaries meet every activation)."""
    if not _rms_upcasts(x):
        return None
    # LoRA keeps neither the head's input nor the normalised output (no weight gradient): the
    # head's input gradient and the norm's output gradient meet the fp32 ones instead
    n = x.n
    unsaved = 0
    if x.lora and not x.chunked_loss and not x.frozen_linear_inputs:
        unsaved += n.linear_input if n.autocast else min(n.compute, n.linear_input)
    if x.lora:
        unsaved += n.residual
    return HEAD_NORM_BACKWARD(x.T, x.h, unsaved)


def input_norm_backward(x: Setup) -> Term | None:
    """A layer's input norm's backward (`INPUT_NORM_BACKWARD`) where it upcasts to fp32 as
    Llama's RMSNorm does, else None."""
    if not _rms_upcasts(x):
        return None
    return INPUT_NORM_BACKWARD(x.T, x.h, x.n.compute, x.n.residual)


def embedding_activations(x: Setup) -> tuple[Term, ...]:
    """Embedding dropout keeps a one-byte mask (GPT-2's embd_pdrop)."""
    return (EMBEDDING_DROPOUT(x.T, x.h),) if x.arch.embd_pdrop else ()
