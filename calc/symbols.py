"""The legend: every symbol a formula uses, its LaTeX and what it means, written once.

Names are what formulas write (`calc.formula`); a formula naming a symbol missing here fails at
import. Widths are bytes per element; counts are per GPU unless said otherwise.
"""

from __future__ import annotations

from typing import NamedTuple


class Symbol(NamedTuple):
    tex: str
    meaning: str


_LEGEND: tuple[tuple[str, str, str], ...] = (
    # sizes
    ("T", "T", "tokens of one micro-batch on one GPU, b s"),
    ("b", "b", "micro-batch size (sequences)"),
    ("s", "s", "sequence length on one GPU (seq_len / cp)"),
    ("S", "S", "sequence length of the whole sequence"),
    ("H", "h", "hidden size"),
    ("h", "h'", "hidden size on one GPU: h / tp with sequence parallelism, else h"),
    ("a", "a", "attention heads on one GPU (heads / tp)"),
    ("k", "k", "key/value heads on one GPU (kv heads / tp, at least 1)"),
    ("d", "d", "head dimension"),
    ("n_h", "n_h", "attention heads of the model"),
    ("f", "f", "MLP intermediate size on one GPU (/ tp)"),
    ("f_w", "f_w", "the widest row-parallel input of a layer on one GPU (the MLP's)"),
    ("I", "I", "MLP intermediate size"),
    ("L", "L", "decoder layers"),
    ("V", "V", "vocabulary size"),
    ("V_t", "V'", "vocabulary rows on one GPU, ceil(V / tp)"),
    ("t_m", "T_\\text{MLP}", "tokens through an MLP: T, or for routed experts T K times the "
     "load factor (the capacity factor, or the busiest rank's share under ep)"),
    ("e", "e", "routed experts"),
    ("K", "K", "experts per token (top-k)"),
    ("d_qk", "d_{qk}", "MLA: query/key head dimension (nope + rope)"),
    ("d_v", "d_v", "MLA: value head dimension"),
    ("d_kv", "d_{kv}", "MLA: kv_b's output per head, k's nope part and v (d_nope + d_v)"),
    ("r_q", "r_\\text{latent}", "MLA: a latent's rank"),
    ("a_h", "a_h", "heads of the normed tensor (a for q, k for k)"),
    ("O_l", "O_\\text{layer}", "a layer's trained projection outputs per token on one GPU"),
    ("O_e", "O_\\text{experts}", "a MoE layer's routed experts' outputs per token on one GPU "
     "(their routed rows spread over the tokens)"),
    ("c_e", "c_e", "bytes per element of the routed experts' activations (grouped_mm is not "
     "autocast: the weights' dtype under amp)"),
    ("N_l", "N_\\text{layer}", "a layer's hidden-size norm outputs per token with trained "
     "weights, norms x h'"),
    ("Q_n", "Q_n", "a layer's per-head q/k norm outputs per token, (a + k) d"),
    ("n_mb", "m", "micro-batches a step (gradient_accumulation_steps)"),
    ("n_i", "n_\\text{in}", "a rank's input backwards run before this moment under a split "
     "backward: each leaves its stage input's gradient in the input's .grad"),
    ("n_rb", "n_\\text{recv}", "a pipeline rank's receive-buffer sets: one for each stage it "
     "holds but the first (activations), one for each but the last (gradients)"),
    ("W_c", "W_c", "weights autocast casts once a step on one GPU (elements)"),
    ("W_1", "W_1", "the weight autocast casts last in a stage's forward (elements)"),
    # parallelism
    ("t", "t", "tensor-parallel size (tp)"),
    ("p", "p", "pipeline-parallel size (pp)"),
    ("N", "N_d", "ranks ZeRO shards over: dp x cp"),
    ("N_1", "N_d^{[z\\ge1]}", "N_d with ZeRO stage 1 or more in effect, else 1"),
    ("N_2", "N_d^{[z\\ge2]}", "N_d with ZeRO stage 2 or more in effect, else 1"),
    ("N_3", "N_d^{[p]}", "N_d where the parameters are sharded (ZeRO-3; FSDP2 at stage 2), else 1"),
    ("N_e", "N_e", "ranks the embedding's gradient is sharded over (N_d from ZeRO 2)"),
    ("X_1", "N_x^{[z\\ge1]}", "expert-data-parallel ranks N_d / ep with ZeRO stage 1 or more in "
     "effect, else 1 (the routed experts' states are sharded over them)"),
    ("X_2", "N_x^{[z\\ge2]}", "N_d / ep with ZeRO stage 2 or more in effect, else 1"),
    ("X_3", "N_x^{[p]}", "N_d / ep where the parameters are sharded, else 1"),
    # widths
    ("c", "c", "bytes of an activation a matmul produces (the compute dtype)"),
    ("r", "r", "bytes of the residual stream (4 under amp)"),
    ("q", "q", "bytes of the copy of a matmul input saved for backward"),
    ("z", "z", "bytes of a norm's output"),
    ("z_q", "z_q", "bytes of a q/k norm's output: its weight as stored times the heads"),
    ("r_s", "r_s", "bytes of the hidden states between pipeline stages (the residual stream's, "
     "or FSDP's param dtype under its mixed-precision policy)"),
    ("B_r", "B_r", "elements of a DeepSpeed reduce bucket (reduce_bucket_size; h^2 under the "
     "HF Trainer's auto)"),
    ("w_a", "w_a", "bytes of a LoRA adapter's parameter (4: peft keeps them fp32; 2 under "
     "DeepSpeed's bf16/fp16 mode, which casts every parameter)"),
    ("q_a", "q_a", "bytes of a LoRA adapter's copy of its input (4, or c under autocast)"),
    ("w_r", "w_r", "bytes of lora_A's output (4, or c under autocast)"),
    ("c_n", "c_n", "bytes of a normalised q/k kept for its weight's gradient (0 when frozen)"),
    ("m", "m", "bytes of the eager attention mask (the embeddings' dtype)"),
    ("u", "u", "bytes of the logits' fp32 copy: 4, or 0 when they are fp32 already"),
    ("w", "w", "bytes of a stored weight"),
    ("w_b", "w_\\text{base}", "bytes of a frozen base weight (LoRA)"),
    ("w_g", "w_g", "bytes of a weight as gathered for compute (FSDP's param_dtype)"),
    ("w_m", "w_m", "bytes of an fp32 master weight or gradient"),
    ("w_s", "w_s", "bytes of an optimizer-state element"),
    ("g", "g", "bytes of a gradient element"),
    ("g_b", "g_b", "bytes per element of a reduce bucket (the gradient's dtype; under ZeRO-3 the communication dtype)"),
    ("n_b", "n_b", "DeepSpeed's reduce buckets: one per communication dtype (2 under "
     "torch_autocast, else 1)"),
    ("g_u", "g_u", "bytes of an unsharded gradient in FSDP's backward (param_dtype under a "
     "mixed-precision policy)"),
    ("g_r", "g_r", "bytes of FSDP's reduce-scatter input (reduce_dtype: fp32 under the policy)"),
    ("q_4", "q_\\text{NF4}", "NF4 bytes per weight: 1/2 + 1/64 + 4/(64 256), double-quantised"),
    ("B_q", "B_q", "bitsandbytes' quantisation block (256 elements)"),
    ("p_d", "\\delta", "1 with dropout, else 0"),
    ("n_g", "n_g", "gated MLP tensors kept: 4, or 3 when down_proj's weight is frozen"),
    ("n_z", "n_z", "clamped SwiGLU tensors kept: 7, or 6 when down_proj's weight is frozen"),
    ("n_m", "n_m", "eager attention masks alive: 2 with sliding-window layers (the causal "
     "mask and the window's), else 1"),
    ("c_s", "c_s", "bytes of eager attention's softmax output: 4 where the model (dtype "
     "float32) or autocast upcasts it, else the compute width"),
    ("c_u", "c_u", "bytes an element of eager attention's fp32 copy of a 16-bit softmax input: "
     "4 where the softmax upcasts bf16 scores (ATen converts first; CUDA's fp16 kernel does not) "
     "or autocast casts them, else 0"),
    ("A_sm", "A_\\text{after}", "what a layer with eager attention saves after its softmax (the norms after "
     "the attention, the MLP, the output projection's input) and the weight copies autocast "
     "casts there"),
    ("c_g", "c_g", "bytes of eager attention's softmax input's gradient: 4, or the compute "
     "width where CUDA's fp16 half-to-float kernel ran the softmax"),
    ("c_q", "c_q", "bytes of eager attention's masked scores, still referenced as the "
     "softmax's output is cast to the queries' dtype: the compute width in a 16-bit model, "
     "else 0 (amp's queries are fp32, nothing is cast)"),
    ("c_p", "c_p", "bytes of the attention probabilities' cast to the values' dtype: the "
     "compute width, or 0 where the softmax ran in it"),
    ("n_r", "n_r", "projections reading one normed tensor"),
    ("n_c", "n_c", "tokens in one chunk of the fused linear cross-entropy"),
    ("m_w", "m_w", "bytes per head weight of the fused loss's mm(...).float() (0 on the "
     "in-place addmm path)"),
    ("u_w", "u_w", "autocast's casts of an fp32 head weight alive in the fused loss (2, or 0)"),
    ("q_c", "q_c", "bytes of peft's fp32 copy of an adapter's input that is not saved"),
    ("q_d", "q_d", "bytes of lora_dropout's output (or the copy it dropped) lora_A does not "
     "keep"),
    ("n_x", "n_x", "MLP-wide gradients alive in a layer's backward: 3, or 2 when the MLP's "
     "weights are frozen"),
    ("n_a", "n_a", "LoRA adapters in a layer"),
    ("c_m", "c_m", "bytes of a frozen MLP's activations and gradients: the compute width, or "
     "a QLoRA base's input width, which its 4-bit layers return (fp32 under amp)"),
    ("c_d", "c_d", "bytes per element of a QLoRA down projection's input alive in its forward "
     "beyond what the layer saves: the input where no adapter shares it, its cast to the "
     "compute dtype where it is wider, less an adapter's own copy, made after (so it can be "
     "negative: that copy, counted among the saved, not made yet)"),
    ("u_d", "u_d", "1 with a LoRA adapter on the down projection, else 0"),
    ("u_g", "u_g", "1 with a LoRA adapter on the gate or up projection, else 0"),
    ("k_d", "k_d", "bytes an element of what an adapter saves of its input and its dropout's "
     "mask, not made yet (0 once the adapter has run)"),
    ("u_x", "u_x", "1 where a QLoRA down projection's input is kept as it is by nothing (its "
     "adapter keeps a copy), else 0"),
    ("q_x", "q_x", "bytes of peft's copy of an adapter's input in the adapter's dtype (0 where "
     "none is made)"),
    ("c_a", "c_a", "bytes of autocast's cast of lora_A's input where it is wider than the "
     "compute dtype (0 where none is made)"),
    ("W_q", "W_q", "elements of a dense layer's down projection on one GPU (a QLoRA 4-bit one)"),
    ("W_u", "W_u", "elements of a dense layer's up projection on one GPU (a QLoRA 4-bit one)"),
    ("k_r", "k_r", "the residual after attention alive beside a layer's recomputation where the "
     "norms do not keep it (1, else 0)"),
    ("n_s", "n_s", "hidden states alive in a layer's forward that its norms do not keep: its "
     "input and the residual after attention (2, or 0 where the norms keep them)"),
    ("u_p", "u_p", "1 where the model adds learned position embeddings to the tokens' "
     "(GPT-2), both held through the layers' forward, else 0"),
    ("r_c", "r_c", "bytes of an RMSNorm's cast of its fp32 normalised tensor back to a "
     "low-precision input's dtype (0 for an fp32 input)"),
    ("E_k", "E_k", "elements of the root's unsharded gradient FSDP's post-backward still "
     "references after releasing the others (the embedding's, or the head's)"),
    ("P_dn", "P_dn", "elements of an MoE layer's routed experts' down projections on one GPU"),
    ("u_r", "u_r", "1 in the layer below the top, where the top's reduce-scatter is in flight, "
     "else 0"),
    ("g_n", "g_n", "bytes of a gradient shard FSDP's reduce writes as a new tensor (0 where it "
     "is added into the shard an earlier backward wrote)"),
    ("A_s", "A_s", "one micro-batch's saved activations of a stage's layers (not the head's)"),
    ("A_k", "A_k", "what one layer keeps in `A_s` (its input, where checkpointed)"),
    ("g_s", "g_s", "bytes of a sharded gradient's cast from FSDP's reduce dtype to its own (0 "
     "where they match)"),
    ("A_a", "A_a", "the saved activations of the layers whose backward has run (the top "
     "layer's, or those above the highest checkpointed one where checkpointing leaves the top "
     "layers out)"),
    ("A_t", "A_t", "the top layer's activations its backward frees (its input, where "
     "checkpointed)"),
    ("g_w", "g_w", "bytes per element of a layer's incoming gradient, and of its cast where "
     "a projection's input is wider than the compute dtype"),
    ("u_n", "u_n", "bytes an element of the head's input and the final norm's output that a "
     "frozen head and norm (LoRA) do not keep, whose gradients meet the norm's fp32 backward "
     "(0 in full training)"),
    ("u_a", "u_a", "2 when Adafactor upcasts a low-precision gradient, else 0"),
    # parameter counts
    ("n_prev", "n_\\text{prev}", "elements of the tensor before the largest one in the "
     "parameters' order"),
    ("P", "P_\\text{local}", "parameters one GPU holds (after tp, pp and ep splits)"),
    ("P_t", "P_\\text{train}", "trainable parameters one GPU holds"),
    ("P_x", "P_\\text{experts}", "routed-expert parameters one GPU holds (after the ep split)"),
    ("P_tx", "P_\\text{train,experts}", "trainable routed-expert parameters one GPU holds"),
    ("P_f", "P_\\text{frozen}", "frozen parameters one GPU holds (LoRA's base)"),
    ("P_q", "P_\\text{linear}", "linear weights one GPU holds (QLoRA quantises them)"),
    ("P_l", "P_\\text{layer}", "one decoder layer's parameters on one GPU, adapters included"),
    ("P_lt", "P_\\text{layer,train}", "the trainable part of one layer on one GPU (its "
     "adapters, with LoRA)"),
    ("P_la", "P_\\text{layer,late}", "the trainable part of a layer past its attention's "
     "softmax on one GPU: its MLP, output projection and the norms after the attention"),
    ("P_lm", "P_\\text{layer,MLP}", "the trainable part of a layer's MLP on one GPU"),
    ("A_m", "A_\\text{MLP}", "the MLP's part of a layer's saved activations (at eager "
     "attention's softmax, all its backward freed before it)"),
    ("A_h", "A_\\text{head}", "what the head saved for its backward: its input and autocast's "
     "copy of its weight"),
    ("g_a", "g_a", "bytes of a reduced gradient partition's cast to DeepSpeed's fp32 accumulation "
     "dtype, where its bucket travelled in autocast's (nn.Linear weights), else 0"),
    ("g_c", "g_c", "bytes of the head's weight gradient cast to the weight's dtype under "
     "autocast (ToCopyBackward), else 0"),
    ("A_d", "A_\\text{below}", "the saved activations of the stage's layers below its first MoE "
     "layer (their checkpointed inputs, when checkpointed)"),
    ("P_xg", "P_\\text{experts,gate/up}", "one MoE layer's gate and up weights of its local "
     "routed experts"),
    ("x_e", "x_e", "bytes of the routed experts' activations (fp32 under amp: grouped_mm runs "
     "outside autocast)"),
    ("E_l", "P_\\text{layer,experts}", "one MoE layer's routed experts on one GPU (FSDP's "
     "expert unit)"),
    ("P_xd", "P_\\text{experts,down}", "one MoE layer's down weights of its local routed "
     "experts"),
    ("d_1", "d_1", "1 when the experts' data-parallel mesh is one rank (FSDP2 then writes the "
     "gradients divided by dp into a new tensor), else 0"),
    ("R_h", "R_\\text{head}", "the output head's unit on one GPU (lm_head)"),
    ("U_n", "U_\\text{next}", "the next unit backward gathers (the layer below, or the "
     "embedding)"),
    ("L_a", "L_a", "layers above the highest checkpointed one, not checkpointed, their "
     "backward done"),
    ("P_ll", "P_\\text{layer,last}", "the trainable part of a layer's last projection (its "
     "backward's first weight gradient)"),
    ("L_l", "P_\\text{layer,linear}", "one layer's linear weights on one GPU (QLoRA's 4-bit part)"),
    ("P_d", "P_\\text{dense}", "parameters of one dense decoder layer"),
    ("P_m", "P_\\text{MoE}", "parameters of one MoE decoder layer"),
    ("P_dl", "P_\\text{dense}'", "parameters of one dense decoder layer on one GPU"),
    ("P_ml", "P_\\text{MoE}'", "parameters of one MoE decoder layer on one GPU"),
    ("L_d", "L_\\text{dense}", "dense decoder layers (of the model, or of the stage)"),
    ("L_m", "L_\\text{MoE}", "MoE decoder layers (of the model, or of the stage)"),
    ("L_c", "L_\\text{ckpt}", "checkpointed decoder layers of one pipeline stage (or chunk)"),
    ("n_pg", "n_\\text{groups}", "a layer's parameter groups in a split weight backward: its "
     "trained projections and norms"),
    ("N_w", "N_w", "the bytes of a checkpointed layer's recomputation that no weight's "
     "gradient reads (what only its input's gradient needs)"),
    ("k_w", "k_w", "the parameter group of a stage's last checkpointed layer at whose "
     "recomputation a split weight backward peaks (1 for the first)"),
    ("U_w", "U_w", "the bytes of that layer's recomputation that group k_w holds: what it and "
     "the groups after it read, beside what none reads"),
    ("B_a", "B_a", "the attention's backward transient at its eager softmax "
     "(act.attention_backward_eager)"),
    ("G_k", "G_k", "a weight pass group's new weight gradient as its node computes it"),
    ("R_k", "R_k", "what a weight pass's groups before group k freed: the saved tensors their "
     "nodes read, their output gradients"),
    ("R_l", "R_l", "what a layer's weight pass groups read, where the layer is not "
     "checkpointed: each projection's input, the norms' inputs and statistics"),
    ("F_w", "F_w", "what a recomputation holds as it stops beside what it stores (the tensors "
     "the layer's forward still uses that no alive node saves), or its group's new weight "
     "gradient, the larger"),
    ("W", "W", "a layer's linear weights: d_in x d_out each, times the routed experts"),
    ("W_l", "W'", "a layer's linear weights on one GPU"),
    ("B_b", "B", "a layer's biases"),
    ("n_n", "n_\\text{norm}", "a layer's norm weights (and LayerNorm biases)"),
    ("E", "E", "the token embedding, V h (and GPT-2's learned positions)"),
    ("S_o", "S_o", "the optimizer step's own temporary (its rule's)"),
    ("E_r", "E_r", "the embedding gradient's elements beyond its tp shard: E - E / tp where "
     "torch's vocabulary-parallel embedding computes its gradient whole, else 0"),
    ("H_v", "E_\\text{head}", "the lm_head, V h (0 when tied to the embedding)"),
    ("n_f", "n_f", "the final norm"),
    ("R", "R", "FSDP's root unit on one GPU: embedding, head and final norm"),
    ("U", "U", "FSDP2 under pipelining: the parameters of the units resharded after the stage's "
     "last backward, the reducing one included"),
    ("U_r", "U_r", "FSDP2 under pipelining: the trainable parameters of the units reduced "
     "before the reducing one"),
    ("U_t", "U_t", "FSDP2 under pipelining: the reducing unit's trainable parameters"),
    ("A", "P_\\text{adapters}", "LoRA adapter parameters one GPU holds"),
    ("r_L", "r", "LoRA rank"),
    ("S_d", "D_\\text{dense}", "sum of d_in + d_out over a dense layer's adapted linears"),
    ("S_m", "D_\\text{MoE}", "sum of d_in + d_out over an MoE layer's adapted linears (the "
     "experts' gate and up fused at rank 2r)"),
    ("S_a", "D'", "sum of d_in + d_out over a layer's adapted linears on one GPU"),
    ("P_z", "P_z", "the parameters of the rank holding the most under torch's "
     "ZeroRedundancyOptimizer: whole tensors, largest first, each to the least-loaded rank"),
    ("G_p", "G_p", "DeepSpeed ZeRO-1/2: the trainable elements of the tensors rank 0's share of "
     "the flat parameters touches, whole (its gradient partition buffer)"),
    ("B_g", "B_g", "bytes of DeepSpeed ZeRO-1/2's gradient partition, released before the "
     "optimizer's own step"),
    ("P_s", "P_s", "DeepSpeed ZeRO-1/2: one rank's share of the flat parameters (padded to a "
     "multiple of 2N, over N ranks)"),
    ("E_p", "E_p", "ZeRO-Offload at stages 1-2: the elements of a tensor's piece of rank 0's "
     "share of the flat parameters normed in fp64 (at stage 2 the untied embedding's, the "
     "first tensor; at stage 1 the widest moment's)"),
    ("G_b", "G_b", "ZeRO-Offload at stage 1: the elements of the tensors in rank 0's share "
     "before the piece being normed, whose gradients went to the host"),
    ("M_h", "M_h", "ZeRO-Offload at stages 1-2: the head's elements in rank 0's share of the "
     "flat parameters (the whole head on one rank)"),
    ("M_x", "M_x", "ZeRO-Offload at stage 2: an MoE layer's stacked gate/up expert weights' "
     "elements in rank 0's share of the flat parameters"),
    ("M_n", "M_n", "ZeRO-Offload at stage 2: an MoE layer's stacked down expert weights' elements "
     "in rank 0's share of the flat parameters"),
    ("M_d", "M_d", "ZeRO-Offload at stage 2: the top layer's down projection's elements in rank "
     "0's share of the flat parameters (all of them on one rank)"),
    ("P_u", "P_\\text{up}", "the trainable elements of a gated MLP's up projection"),
    ("c_w", "c_w", "bytes of an element of autocast's copy of a weight (0 without such copies)"),
    ("M_p", "M_p", "DeepSpeed: the largest piece of one tensor in a rank's partition (ZeRO-1/2: "
     "rank 0's share of the flat parameters; ZeRO-3: the largest tensor over N)"),
    ("G_o", "G_o", "DeepSpeed ZeRO-Offload: the elements of the tensors rank 0's share touches "
     "that are larger than the reduce bucket"),
    ("G_z", "G_z", "DeepSpeed ZeRO-3: the parameters its coordinator holds gathered at the "
     "moment (calc.coordinator)"),
    ("P_p", "P_p", "DeepSpeed ZeRO-3: the persistent parameters, of at most "
     "stage3_param_persistence_threshold elements each (norms, biases)"),
    ("S_g", "S_g", "DeepSpeed ZeRO-3: the largest optimizer sub-group, in partition elements"),
    ("w_f", "w_f", "DeepSpeed's step: bytes per element of the partition's gradients flattened "
     "(where the share spans several tensors) and cast to fp32"),
    ("w_k", "w_k", "DeepSpeed's step: bytes per element of the fp32 gradients the optimizer "
     "reads"),
    ("w_t", "w_t", "DeepSpeed's step: bytes per element of the Adam step's temporary (torch's "
     "foreach Adam: 4; FusedAdam: 0)"),
    ("W_e", "W_e", "a MoE layer's routed expert weights on one GPU"),
    ("W_d", "W_\\text{down}", "a MoE layer's routed experts' down-projection weights on one GPU"),
    ("S_e", "P_e", "the LoRA parameters of a MoE layer's routed experts on one GPU"),
    ("n_p", "n_p", "fp32 tensors of T h a post-norm keeps: its copy, and the normalised one "
     "where its weight trains"),
    ("w_c", "w_c", "bytes per element of a MoE layer's weighted expert outputs: 4 where the "
     "routing weights are fp32, else the experts' width"),
    ("w_x", "w_x", "bytes per element of the experts' output gradient cast back to their "
     "width, where it differs from w_c; else 0"),
    ("n_d", "n_d", "1 where an MLP's down projection trains and keeps its input, else 0"),
    ("n_e", "n_e", "routed-expert tensors kept per row: outputs, and inputs when they train"),
    ("n_kv", "n_{kv}", "a sliding layer's K and V repeated to every query head as copies: both "
     "with grouped heads; with one K/V head the repeat is a view, copied only where autocast "
     "casts it (an fp32 residual stream: K after the fp32 rotation)"),
    ("d_i", "d_\\text{in}", "input features of the adapted projection on one GPU"),
    ("Q_r", "Q_\\text{ring}", "context parallelism's local queries' elements (T a d_qk)"),
    ("K_r", "K_\\text{ring}", "context parallelism's local keys' and values' elements "
     "(T a (d_qk + d_v))"),
    ("n_cp", "n_\\text{cp}", "the context-parallel ranks (cp)"),
    ("d_o", "d_\\text{out}", "output features of the adapted projection on one GPU"),
    ("c_o", "c_\\text{out}", "bytes of a frozen projection's output: the compute width, or "
     "bitsandbytes' in its input's width (QLoRA)"),
    ("F", "F", "Adafactor's factors: rows + cols of each trainable matrix, vectors whole"),
    ("n_max", "n_\\text{max}", "elements of the largest trainable tensor"),
    # bytes of other terms
    ("X_l", "X_\\text{layer}", "a layer's transient (its widest moment's extra bytes)"),
    ("X_f", "X_\\text{fwd}", "a layer's forward transient"),
    ("D_l", "D_\\text{last}", "a layer's last projection's saved input, freed by its backward "
     "before the layer's widest backward moment"),
    ("W_n", "W_\\text{new}", "a layer's last projection's new weight gradient at its backward, "
     "before it is added in place to the one an earlier micro-batch wrote"),
    ("g_i", "g_\\text{in}", "the gradient arriving at a layer's output, T h at residual width"),
    ("A_l", "A_\\text{layer}", "the widest layer's saved activations (one micro-batch)"),
    ("A_r", "A_r", "the top layer's activations recomputed for its backward (0 where they are "
     "saved, among the others)"),
    ("x_c", "x_c", "what a checkpointed layer keeps that its recomputation rebuilds too (the "
     "residual a norm keeps, the outputs the selective policy saves; past the recomputation, "
     "which takes them back, all those outputs)"),
    ("x_l", "x_\\text{layer}", "a layer's input, kept when checkpointed"),
    ("A_0", "A_0", "what the first layer keeps (its input when checkpointed, else every "
     "activation it saves)"),
    ("K_o", "K_\\text{ops}", "the op outputs a layer keeps under per-op selective checkpointing"),
    ("G_l", "G_\\text{layer}", "one layer's gathered parameters (FSDP)"),
    ("G_r", "G_\\text{run}", "the running layer's gathered parameters (FSDP; a dense layer "
     "beside MoE ones at its own width)"),
    ("M_g", "M_g", "every gradient on this GPU"),
    ("m_e", "m_e", "elements of the embedding's gradient not yet written"),
    ("m_l", "m_l", "elements of FSDP's last layers' gradients not yet written"),
    ("M", "M_\\text{peak}", "the allocated peak"),
    ("f_a", "f_a", "the allocator's reserve as a fraction of the peak (empirical)"),
    ("M_0", "M_0", "the allocator's smallest reserve (empirical)"),
    ("A_o", "M_\\text{alloc}", "the allocator's reserve"),
    ("C_x", "C", "a CUDA context with PyTorch's kernels (empirical)"),
    ("G_n", "G", "process groups of more than one rank: dp x cp, tp, pp, ep"),
    ("B_n", "B_\\text{NCCL}", "NCCL's buffers per process group (empirical)"),
    ("N_o", "M_\\text{NCCL}", "NCCL's buffers"),
    # the baselines
    ("w_p", "w_p", "bytes per weight and per gradient (2 in 16-bit training, else 4)"),
    ("o_p", "o_p", "optimizer bytes per parameter as Transformer Math 101 counts them"),
)
SYMBOLS: dict[str, Symbol] = {name: Symbol(tex, meaning) for name, tex, meaning in _LEGEND}
if len(SYMBOLS) != len(_LEGEND):  # a name written twice would keep only its last meaning
    twice = sorted({n for n, *_ in _LEGEND if sum(m == n for m, *_ in _LEGEND) > 1})
    raise ValueError(f"symbols written twice: {twice}")
