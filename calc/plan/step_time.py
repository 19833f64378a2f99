r"""Step time of one parallel layout: compute, recomputation, each parallelism's communication
and the pipeline bubble, in seconds per optimizer step. The parallelism advisor
(`calc.plan.advise`) ranks the layouts that fit by it.

**Step time** (seconds; \(G\) sequences of \(s\) tokens per step, \(N\) GPUs)
is the sum of the parts below. Nothing overlaps with compute unless `overlap` > 0, which hides
that fraction of every communication term (an assumption: Megatron-LM and FSDP overlap much of
the DP and some of the TP traffic, so the default 0 is pessimistic).

- `compute`, `recompute`: \(F G s / (N \cdot P \cdot mfu)\) with \(F\) the model and
  the recomputed FLOPs per token of `calc.plan.cost` (Kaplan et al. 2020; PaLM appendix
  B; Korthikanti et al. 2022 for recomputation), \(P\) the GPU's dense TFLOPS in the
  training precision. Here `mfu` is the efficiency of the compute alone (cost.py's `mfu` also
  absorbs communication and bubbles), so the default 0.4 leaves these times conservative.
  Per-GPU efficiency is assumed not to depend on the layout or the micro-batch.
- `tp_comm`: Megatron-LM's tensor parallelism all-reduces the layer's output twice in forward
  and twice in backward (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", section 3.2; sequence parallelism swaps each for an
  all-gather plus a reduce-scatter of the same volume, Korthikanti et al. 2022), two more with
  full recomputation: \(4 L_{st} \cdot (G/d) \cdot (s/c) h a \cdot 2(t-1)/t / B_{tp}\)
  (\(L_{st}\) layers per stage, \(d\) = dp, \(c\) = cp, \(t\) = tp,
  \(a\) bytes per activation element, \(2(t-1)/t\) the ring all-reduce's cost).
- `cp_comm`: context parallelism all-gathers K and V in forward and again in backward and
  reduce-scatters their gradients (Megatron-LM's context parallelism; Liu et al. 2023, "Ring
  Attention"), one more gather with full recomputation:
  \(3 L_{st} (G/d) \cdot (c-1)/c \cdot s \cdot w_{kv}/t \cdot a / B_{cp}\)
  (\(w_{kv}\) = K plus V width per token: 2 x kv heads x head size; MLA: heads x
  (qk_nope + qk_rope + v)).
- `ep_comm`: two all-to-alls (dispatch, combine) per MoE layer in forward and two in backward
  (Lepikhin et al. 2020, "GShard"), two more with full recomputation, each moving \(k\)
  copies of the GPU's tokens: \(4 L^{moe}_{st} (G/d)(s/c') k h a \cdot (e-1)/e / B_{ep}\)
  (\(c'\) = cp, times tp with sequence parallelism; \(k\) experts per token).
- `dp_comm`: gradients over the \(D = d \cdot c\) ranks ZeRO shards over, ring cost
  \((D-1)/D\) per pass of the GPU's \(\Psi\) parameters (Rajbhandari et al. 2020,
  "ZeRO", section 7): ZeRO 0/1 reduce-scatter + all-gather once per step
  (\(2\Psi\), gradients accumulated locally); ZeRO-2 keeps only a gradient shard, so it
  reduce-scatters every micro-batch plus one parameter all-gather (\((m+1)\Psi\)); ZeRO-3
  (FSDP2, reshard after forward) also all-gathers the parameters in forward and backward of
  every micro-batch (\(3m\Psi\), the 3x of the ZeRO paper at \(m = 1\)). Each pass
  moves elements of the width the memory model gives them (`calc.numerics`: gradients as
  stored, parameters as stored, or as gathered with ZeRO-3); \(\Psi\) is the largest
  stage's trainable parameters (all of them for the ZeRO-3 gathers), expert weights included
  as if reduced over the whole \(D\) (a simplification: they are reduced over D / ep).
- `offload`: ZeRO-Offload moves the gradient shard to the host and the updated weight shard
  back every step (\(\Psi_t/D\) elements each way, at their widths) over PCIe, and the
  CPU runs the optimizer on the shard; ZeRO-Infinity (parameters offloaded too) also fetches
  the parameter shard in forward and in backward of every micro-batch
  (\(2m\Psi/D\)). PCIe at `pcie_gbps` one way (default 25 GB/s: a PCIe 4.0 x16 link's
  ~32 GB/s less protocol overhead; Gen5 hosts give about twice), the CPU step at
  `CPU_ADAM_PARAMS_PER_S` per node shared by its GPUs (EMPIRICAL, a judgement of DeepSpeed's
  CPU-Adam on a two-socket server, not measured here). Ren et al. (2021), "ZeRO-Offload",
  section 4; Rajbhandari et al. (2021), "ZeRO-Infinity".
- `dequant`: QLoRA's frozen base is stored in NF4 (`calc.states`); bitsandbytes'
  `MatMul4Bit` dequantises each linear weight to the compute dtype before its matmul, in
  forward and again for the input gradient in backward (and in the recomputed forward), once
  per micro-batch: \((2 + r) \, m \, (P_{nf4} + P_{qs} + P_q a) / B_{hbm}\), memory-bound
  (\(P_q\) the GPU's quantised linear weights, of the largest stage, after tp/ep splits and
  gathered under ZeRO-3; \(P_{nf4}\), \(P_{qs}\) their packed bytes and quantisation
  statistics read, `states.qlora_nf4` and `states.qlora_quant_state`; \(P_q a\) the weight
  written; \(r\) the recomputed share of layers; \(B_{hbm}\) the GPU's memory bandwidth,
  assumed reached: a lower bound of the kernels' time). The matmul then reads the weight as a
  LoRA step reads its bf16 base, which `compute` already holds. Dettmers et al. (2023),
  "QLoRA", section 3; bitsandbytes `autograd/_functions.py`. Because it is paid per
  micro-batch, it weighs most where micro-batches are short.
- `bubble`: 1F1B pipeline bubble, a fraction \((p-1)/(m+p-1)\) of the step (Narayanan et
  al. 2021, section 2.2), i.e. \((p-1)/m\) times the pipelined work (everything above but
  `dp_comm`); \(m\) = gradient_accumulation_steps. Point-to-point traffic is not counted.

What a LoRA or QLoRA step saves is in the terms, not a factor: the frozen base computes no
weight gradients (4N FLOPs per token instead of 6N, `calc.plan.cost`), only the adapters' \(
\Psi_t\) gradients cross the data-parallel ranks (`dp_comm`) and reach the host
(`offload`), and the CPU optimizer steps only them. The GPU optimizer step itself (a
memory-bound pass over the trainable states) is not modelled, for any plan.

Links (Megatron-LM's rank order: tp innermost, then cp, dp, pp): a group that stays inside a
node uses the GPU's `interconnect.bandwidth_gbps` **halved** (presets give NVLink's
bidirectional marketing figure; a ring sends one way), one that spans nodes uses
`inter_node_gbps` (GB/s per GPU, one way; default 50 = one 400 Gb/s InfiniBand NDR port per
GPU, as in DGX H100). Latency, hierarchical collectives and congestion are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..architecture import Architecture
from ..states import QLORA_PACKED, QLORA_QUANT_STATE, local
from .cost import Flops

if TYPE_CHECKING:
    from ..estimate import Estimate
    from ..setup import Setup

TIME_PARTS = ("compute", "recompute", "dequant", "tp_comm", "cp_comm", "ep_comm", "dp_comm",
              "offload", "bubble")
DEFAULT_PCIE_GBPS = 25.0  # GB/s one way per GPU: PCIe 4.0 x16 (~32 GB/s raw) less overhead
CPU_ADAM_PARAMS_PER_S = 2e9  # EMPIRICAL (judgement): DeepSpeed CPU-Adam, parameters/s per node
# Recomputed share of each checkpointing mode's layers: "partial" is full checkpointing of the
# first half of each stage's layers (training.recompute_layers).
RECOMPUTED = {"none": 0.0, "selective": 0.0, "partial": 0.5, "full": 1.0}


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds per optimizer step, by part (see the module docstring)."""

    compute: float
    recompute: float
    dequant: float
    tp_comm: float
    cp_comm: float
    ep_comm: float
    dp_comm: float
    offload: float
    bubble: float

    @property
    def total(self) -> float:
        return (self.compute + self.recompute + self.dequant + self.tp_comm + self.cp_comm
                + self.ep_comm + self.dp_comm + self.offload + self.bubble)

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TIME_PARTS}


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What every layout shares: the model, the GPU, the batch, the links."""

    arch: Architecture
    moe_layers: int
    gpus: int
    node: int  # GPUs per node (capped at the GPU count)
    seq_len: int
    global_batch: int
    act_bytes: int  # bytes per activation element on the wire
    flops: dict[str, Flops]  # per checkpointing mode
    flops_per_s: float  # all GPUs: N x peak x mfu
    intra_bps: float  # bytes/s one way
    inter_bps: float
    exposed: float  # 1 - overlap
    tp_across_nodes: bool
    hbm_bps: float  # the GPU's memory bandwidth, bytes/s (QLoRA's dequantisation)
    pcie_bps: float = DEFAULT_PCIE_GBPS * 1e9  # bytes/s one way, per GPU
    cpu_params_per_s: float = CPU_ADAM_PARAMS_PER_S / 8  # the CPU optimizer's rate, per GPU


@dataclass(frozen=True, slots=True)
class _Layout:
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    zero: int
    mixed: str = "amp"  # training.mixed_precision
    offload: int = 0  # 0 none, 1 optimizer (ZeRO-Offload), 2 optimizer and parameters

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        return self.tp, self.pp, self.dp, self.cp, self.ep


def _bps(c: _Ctx, span: int) -> float:
    """One-way bandwidth of a group of consecutive ranks `span` wide."""
    inside = span <= c.node and c.node % span == 0
    return c.intra_bps if inside else c.inter_bps


@dataclass(frozen=True, slots=True)
class Held:
    """What one GPU of the largest stage holds, for the step time: parameters (frozen
    included) and trainable parameters before ZeRO, and the bytes one dequantisation pass of
    its QLoRA base moves (0 without QLoRA)."""

    total: int
    trainable: int
    dequant_bytes: int = 0


def dequant_bytes(quantised: int, compute_bytes: int) -> int:
    """Bytes one pass of bitsandbytes' dequantisation moves for `quantised` NF4 weights: the
    packed weights and their statistics read (calc.states' formulas), the weight written."""
    read = QLORA_PACKED(quantised, 1).bytes + QLORA_QUANT_STATE(quantised).bytes
    return read + quantised * compute_bytes


def _step_time(c: _Ctx, lay: _Layout, ckpt: str, mb: int, held: Held,
               weight_bytes: int, grad_bytes: int) -> StepTime:
    """Step time of one layout at micro-batch `mb` (formulas: the module docstring)."""
    a, h, s = c.arch, c.arch.hidden_size, c.seq_len
    t, p, d, cp, e = lay.tp, lay.pp, lay.dp, lay.cp, lay.ep
    seqs = c.global_batch // d  # sequences per replica per step
    m = seqs // mb  # micro-batches (gradient_accumulation_steps)
    f = c.flops[ckpt]
    compute = f.model * c.global_batch * s / c.flops_per_s
    recompute = f.recompute * c.global_batch * s / c.flops_per_s
    layers = -(-a.num_hidden_layers // p)
    full = RECOMPUTED[ckpt]
    dequant = (2 + full) * m * held.dequant_bytes / c.hbm_bps
    tp_comm = cp_comm = ep_comm = 0.0
    if t > 1:
        bytes_ = (4 + 2 * full) * layers * seqs * (s // cp) * h * c.act_bytes * 2 * (t - 1) / t
        tp_comm = bytes_ / _bps(c, t)
    if cp > 1:
        if a.is_mla:
            kv_width = a.num_attention_heads * ((a.qk_nope_head_dim or 0)
                                                + (a.qk_rope_head_dim or 0) + (a.v_head_dim or 0))
        else:
            kv_width = 2 * a.kv_heads * a.head_size
        bytes_ = ((3 + full) * layers * seqs * (cp - 1) / cp * s * kv_width / t * c.act_bytes)
        cp_comm = bytes_ / _bps(c, t * cp)
    if e > 1:
        moe_layers = -(-c.moe_layers // p)
        tokens = s // cp // (t if s % (t * cp) == 0 else 1)  # sequence parallel splits over tp
        bytes_ = ((4 + 2 * full) * moe_layers * seqs * tokens * a.num_experts_per_tok * h
                  * c.act_bytes * (e - 1) / e)
        ep_comm = bytes_ / _bps(c, t * e)
    dp_comm = 0.0
    D = d * cp
    total, trainable = held.total, held.trainable
    if D > 1:
        ring = (D - 1) / D
        if lay.zero <= 1:
            passes = 2 * trainable * grad_bytes
        elif lay.zero == 2:
            passes = m * trainable * grad_bytes + trainable * weight_bytes
        else:
            passes = m * (2 * total * weight_bytes + trainable * grad_bytes)
        dp_comm = ring * passes / _bps(c, t * cp * d)
    offload = 0.0
    if lay.offload:
        shard, shard_t = total / D, trainable / D
        moved = shard_t * (grad_bytes + weight_bytes)  # gradients out, updated weights back
        if lay.offload == 2:
            moved += 2 * m * shard * weight_bytes  # the shard fetched in forward and backward
        offload = c.exposed * moved / c.pcie_bps + shard_t / c.cpu_params_per_s
    x = c.exposed
    pipelined = compute + recompute + dequant + x * (tp_comm + cp_comm + ep_comm)
    bubble = pipelined * (p - 1) / m
    return StepTime(compute, recompute, dequant, x * tp_comm, x * cp_comm, x * ep_comm, x * dp_comm,
                    offload, bubble)


__all__ = ["CPU_ADAM_PARAMS_PER_S", "DEFAULT_PCIE_GBPS", "RECOMPUTED", "TIME_PARTS", "Held",
           "StepTime", "dequant_bytes", "held_by", "step_time_of"]


def step_time_of(report: Estimate, *, gpus_per_node: int = 8,
                 inter_node_gbps: float = 50.0, mfu: float = 0.4, overlap: float = 0.0,
                 pcie_gbps: float = DEFAULT_PCIE_GBPS) -> StepTime | None:
    """The step time of an estimated scenario as laid out, by the advisor's model (None where
    the GPU preset lists no dense rate for the precision). The defaults are the advisor's."""
    from ..numerics import numerics
    from .cost import _PEAK_KEY, flops_per_token

    r, x = report.resolved, report.setup
    t, p = r.training, r.parallelism
    peak = r.gpu.dense_tflops.get(_PEAK_KEY[t.precision])
    if peak is None:
        return None
    ckpt = t.activation_checkpointing
    adapters = report.trainable_param_count if t.finetuning != "full" else 0
    flops: dict[str, Flops] = {ckpt: flops_per_token(r.arch, t, adapters)}
    gpus = p.world_size
    node = min(gpus_per_node, gpus)
    ctx = _Ctx(r.arch, r.arch.moe_layer_count, gpus, node, t.seq_len,
               t.micro_batch_size * t.gradient_accumulation_steps * p.dp,
               numerics(t.precision, t.mixed_precision, False).compute, flops,
               gpus * peak * 1e12 * mfu, r.gpu.interconnect.bandwidth_gbps / 2 * 1e9,
               inter_node_gbps * 1e9, 1 - overlap, True, r.gpu.memory_bandwidth_gbps * 1e9,
               pcie_gbps * 1e9, CPU_ADAM_PARAMS_PER_S / node)
    offload = 2 if p.offload_params and p.zero == 3 else 1 if p.offload_optimizer else 0
    lay = _Layout(p.tp, p.pp, p.dp, p.cp, p.ep, p.zero, t.mixed_precision, offload)
    n = numerics(t.precision, t.mixed_precision, p.zero >= 2)
    wb = n.gathered_weight if p.zero == 3 else n.weight
    return _step_time(ctx, lay, ckpt, t.micro_batch_size, held_by(x, n.compute), wb,
                      n.grad)


def held_by(x: Setup, compute_bytes: int) -> Held:
    """`Held` for the largest stage of a laid-out scenario (calc.setup's symbols)."""
    stages = [local(x, st) for st in x.stages]
    quantised = max(h.linear_weights for h in stages) if x.qlora else 0
    return Held(max(h.total for h in stages), max(h.trainable for h in stages),
                dequant_bytes(quantised, compute_bytes) if quantised else 0)
