"""The resolved setup: every symbol the formulas need, unpacked once from a validated scenario.

The formula modules (`placement`, `states`, `activations`, `logits`, `overhead`, `peak`) take a
`Setup` and never import the scenario module, so the input contract can change without
touching a formula. Mode questions are answered here once, by name: `lora`, `qlora`, `eager`,
`full_checkpointing`, `chunked_loss`, `megatron`...

Symbols follow the papers (per GPU):

    b  micro-batch             s  sequence per GPU (seq_len / cp)     T  tokens, b s
    h  hidden size per GPU (h / tp under sequence parallelism)        H  hidden size
    a, k  query and key/value heads / tp                              d  head dim
    N  ranks ZeRO shards over (dp x cp)                               z  the ZeRO stage in effect
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .architecture import Architecture
from .coordinator import Sizes, zero_sizes
from .numerics import Numerics, numerics_for
from .optimizers import OPTIMIZERS, Optimizer, OptimizerImpl
from .params import ParamCounts, count_params, lora_targets_of
from .placement import Stage, every_nth, stages
from .scenario import Parallelism, Resolved
from .schedule_order import Held, zbv_held, zero_bubble_held


class Setup:
    """A scenario's symbols, modes answered by name (see the module docstring). Built once
    per estimate from a resolved scenario; nothing changes it afterwards."""

    __slots__ = (
        "H",
        "N",
        "T",
        "a",
        "arch",
        "b",
        "checkpoint_every",
        "chunked_loss",
        "counts",
        "cp",
        "d",
        "deepspeed",
        "dp",
        "eager",
        "ep",
        "fp16",
        "full_checkpointing",
        "h",
        "k",
        "lora",
        "lora_dropout",
        "lora_rank",
        "lora_targets",
        "math_attention",
        "megatron",
        "micro_batches",
        "n",
        "offload_optimizer",
        "offload_params",
        "optimizer",
        "optimizer_impl",
        "padded_sdpa",
        "plain_optimizer",
        "pp",
        "qlora",
        "recompute_layers",
        "routed",
        "s",
        "schedule",
        "sdpa_flash",
        "selective_attention",
        "selective_ops",
        "seq_len",
        "sequence_parallel",
        "sliding_sdpa",
        "stages",
        "tp",
        "virtual_stages",
        "vocab",
        "vocab_grad_split",
        "z",
        "zero",
        "zero_sizes",
    )
    arch: Architecture
    counts: ParamCounts
    n: Numerics  # the byte width of each kind of tensor
    stages: tuple[Stage, ...]  # the pipeline stages that can set the peak
    # sizes per GPU
    seq_len: int  # the whole sequence
    b: int
    s: int
    T: int
    h: int
    H: int
    a: int
    k: int
    d: int
    vocab: int  # the head's outputs per GPU: ceil(V / tp), or a classification head's labels
    # parallelism
    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    schedule: str  # the pipeline schedule
    routed: int  # tokens through one GPU's routed experts: T K, times the load factor
    virtual_stages: int
    N: int  # dp x cp
    zero: int  # the stage asked for
    z: int  # the stage in effect: 0 when N = 1, unless something is offloaded
    sequence_parallel: bool
    offload_optimizer: bool
    offload_params: bool
    # training
    micro_batches: int  # gradient_accumulation_steps
    lora: bool  # LoRA or QLoRA: a frozen base with trainable adapters
    qlora: bool
    lora_rank: int
    lora_targets: frozenset[str]  # empty unless lora
    lora_dropout: float
    deepspeed: bool  # DeepSpeed's engine and ZeRO (parallelism.framework, master by default)
    plain_optimizer: bool  # DeepSpeed's engine without ZeRO, 16-bit weights: its BF16_Optimizer
    # or FP16_Optimizer
    zero_sizes: Sizes  # DeepSpeed's zero_optimization sizes (the scenario's, else calc's export's)
    optimizer: Optimizer
    optimizer_impl: OptimizerImpl
    full_checkpointing: bool
    selective_attention: bool  # Megatron's selective recompute: the attention core
    selective_ops: bool  # torch's per-op selective checkpointing (torchtitan's policy)
    recompute_layers: int | None
    checkpoint_every: int | None
    eager: bool  # eager attention (the score matrix is materialised)
    math_attention: bool  # SDPA falls back to its math kernel (fp32 with grouped K/V heads)
    padded_sdpa: bool  # a padding mask under SDPA: every layer masked (memory-efficient kernel)
    sdpa_flash: bool  # the GPU has SDPA's flash kernel (sm80 and newer)
    sliding_sdpa: bool  # sliding-window layers run SDPA with a mask (Gemma 3, s >= window)
    chunked_loss: bool
    fp16: bool  # 16-bit in fp16, not bf16 (CUDA's softmax takes fp16 to fp32 in one kernel)
    megatron: bool  # implementation megatron (Korthikanti's per-layer formula)
    vocab_grad_split: int  # tp, or 1 where the embedding's gradient is whole on each tp rank

    def __init__(self, r: Resolved, parallelism: Parallelism | None = None) -> None:
        """The symbols of `r`, or of `r` laid out as `parallelism` (the advisor's search)."""
        arch, t, p = r.arch, r.training, parallelism or r.parallelism
        self.arch = arch
        self.counts = count_params(arch)
        # DeepSpeed's engine (master weights, or asked for): its own ZeRO, never FSDP2
        self.deepspeed = p.engine(t.mixed_precision) == "deepspeed"
        self.zero_sizes = zero_sizes(arch.hidden_size, p)
        self.n = numerics_for(t.precision, t.mixed_precision, p.zero_in_effect(t),
                              self.deepspeed)
        every = t.checkpoint_every if t.activation_checkpointing == "full" else None
        self.stages = stages(self.counts, p.pp, p.pipeline_schedule, p.virtual_stages,
                             every or 0)
        self.schedule, self.virtual_stages = p.pipeline_schedule, p.virtual_stages
        self.seq_len = t.seq_len
        self.b = t.micro_batch_size
        self.s = t.seq_len // p.cp
        self.T = self.b * self.s
        self.H = h = arch.hidden_size
        self.h = h // p.tp if p.sequence_parallel else h
        self.a = arch.num_attention_heads // p.tp
        self.k = max(1, arch.kv_heads // p.tp)
        self.d = arch.head_size
        # the head's outputs on one GPU: the vocabulary is split over tp, a classification
        # head's few labels are not
        self.vocab = arch.num_labels or -(-arch.vocab_size // p.tp)
        self.dp, self.tp, self.pp, self.cp, self.ep = p.dp, p.tp, p.pp, p.cp, p.ep
        self.N = p.dp * p.cp
        self.zero = p.zero
        # one rank shards nothing, but offload works on one GPU, and FSDP or DeepSpeed wrap one
        # rank as they wrap many: their copies and buffers stay (`fsdp_collectives`, and
        # `coordinator.one_rank`)
        self.z = p.zero_in_effect(t)
        self.sequence_parallel = p.sequence_parallel
        self.offload_optimizer = p.offload_optimizer
        self.offload_params = p.offload_params
        self.plain_optimizer = self.deepspeed and self.z == 0 and t.precision != "fp32" \
            and t.mixed_precision == "master"
        self.micro_batches = t.gradient_accumulation_steps
        self.lora = lora = t.finetuning != "full"
        self.qlora = t.finetuning == "qlora"
        self.lora_rank = t.lora_rank
        self.lora_targets = lora_targets_of(t.lora_targets, arch) if lora else frozenset()
        self.lora_dropout = t.lora_dropout if lora else 0.0
        self.optimizer = OPTIMIZERS[t.optimizer]
        self.optimizer_impl = t.optimizer_impl
        self.full_checkpointing = t.activation_checkpointing == "full"
        self.selective_attention = t.policy == "attention"
        self.selective_ops = t.policy == "ops"
        self.recompute_layers = t.recompute_layers
        self.checkpoint_every = t.checkpoint_every
        self.eager = t.attention == "eager"
        # torch 2.13's CUDA SDPA: flash takes only 16-bit inputs on sm80 and newer,
        # memory-efficient no grouped K/V heads, so fp32 attention, or any attention on a
        # Volta or Turing GPU, with fewer K/V than query heads and no mask runs the math
        # kernel (a masked layer, padded or sliding, gets K/V repeated: memory-efficient)
        # (GPT-OSS's sinks: not SDPA's; its flash kernel takes the window and the sinks)
        sinks = arch.traits.sinks
        self.sdpa_flash = r.gpu.sdpa_flash
        # (a padding mask: transformers repeats K/V itself and the memory-efficient kernel
        # takes the mask, so no layer runs math for its grouped heads)
        self.padded_sdpa = (t.padded and not self.eager and not sinks
                            and t.implementation == "hf")
        self.math_attention = (not self.eager and not sinks and t.implementation == "hf" and
                               not t.padded and (self.n.compute == 4 or not self.sdpa_flash)
                               and 0 < arch.kv_heads < arch.num_attention_heads
                               and not arch.is_mla)
        self.chunked_loss = t.loss == "chunked"
        self.fp16 = t.precision == "fp16"
        self.megatron = t.implementation == "megatron"
        # transformers masks the sliding layers once the sequence reaches the window (below it
        # every layer keeps is_causal); the mask rules flash out for them
        window = arch.sliding_window
        # (their mask makes transformers repeat K/V: the memory-efficient kernel runs them even
        # where the global layers run math for their grouped heads)
        self.sliding_sdpa = (window is not None and bool(arch.sliding_layers) and not self.eager
                             and not sinks and not self.megatron and self.s >= window)
        # The rows the embedding's gradient is split into on one GPU before any ZeRO/FSDP
        # reduction. torch's vocabulary-parallel embedding (a DTensor RowwiseParallel weight,
        # as torchtitan and the traces shard it) computes its gradient whole: DTensor's
        # embedding_dense_backward has no row-wise strategy, so every tp rank holds a Replicate
        # V x h gradient until FSDP redistributes it or the optimizer steps. Megatron-LM's
        # VocabParallelEmbedding keeps its shard; a tied or frozen weight is left as its shard
        # (not traced).
        self.vocab_grad_split = p.tp if (
            self.megatron or self.deepspeed or lora or arch.tie_word_embeddings) else 1
        # padded to capacity where a capacity factor is set; dropless, the busiest rank's share
        load = t.moe_capacity_factor or (t.moe_load_imbalance if p.ep > 1 else 1.0)
        self.routed = math.ceil(self.T * arch.num_experts_per_tok * load) if arch.is_moe else 0

    def frozen_input_layer(self, stage: Stage) -> bool:
        """Whether `stage`'s first layer takes an input that needs no gradient: the frozen
        embedding's output under LoRA, unless checkpointing is on (transformers' checkpointing
        enables `enable_input_require_grads`, for the checkpoint's sake)."""
        return (self.lora and stage.embedding and not self.megatron
                and not any(self.checkpointed(stage)) and not self.selective_attention)

    @property
    def frozen_linear_inputs(self) -> bool:
        """Every linear keeps its input for backward, its weight frozen or not: DeepSpeed's
        ZeRO-3 swaps F.linear for its LinearFunctionForZeroStage3 (memory_efficient_linear,
        on by default), whose save_for_backward keeps input, weight and bias whichever needs a
        gradient. A frozen projection (LoRA's base) keeps an input torch's own mm would not.
        Under torch_autocast it casts inside the function: the input is kept as given (fp32
        from the norms), not autocast's cast of it (traced)."""
        return self.deepspeed and self.z == 3

    @property
    def fsdp_collectives(self) -> bool:
        """Whether FSDP2 runs its collectives, over dp x cp > 1 ranks. Across ranks it gathers
        a unit into one flat output and copies that out into the unsharded parameters,
        keeping the output past the copy in forward (until the next unit's) and prefetching
        the next unit's in both passes; on one rank it copies each shard straight into its
        unsharded parameter as the unit runs, so no output is held, left behind or
        prefetched (torch 2.13's FSDPParamGroup.unshard and wait_for_unshard, world size 1)."""
        return self.N > 1

    @property
    def fsdp(self) -> bool:
        """ZeRO-3 in effect: parameters gathered per layer (FSDP2, or DeepSpeed's stage 3)."""
        return self.z == 3

    def whole_embedding_grad(self, stage: Stage) -> bool:
        """Whether one GPU of `stage` holds the embedding's gradient whole
        (`vocab_grad_split`)."""
        return stage.embedding and self.vocab_grad_split < self.tp

    def checkpointed_layers(self, stage: Stage) -> int:
        """Layers of `stage` that keep only their input under full checkpointing (and the
        outputs the policy saves, under per-op selective checkpointing)."""
        return sum(self.checkpointed(stage))

    def checkpointed(self, stage: Stage) -> tuple[bool, ...]:
        """Which of `stage`'s layers, in order, recompute in backward."""
        if self.selective_ops:  # every layer keeps its input and the saved ops' outputs
            return (True,) * stage.layers
        if not self.full_checkpointing:
            return (False,) * stage.layers
        if self.checkpoint_every:
            return every_nth(stage.first_layer, stage.layers, self.checkpoint_every)
        k = min(self.recompute_layers or stage.layers, stage.layers)
        return (True,) * k + (False,) * (stage.layers - k)

    def flight(self, stage: Stage) -> Flight:
        """What `stage`'s pipeline schedule keeps at once: micro-batches (of its `unit` where
        it has one) whose activations are alive together, as torch.distributed.pipelining's
        schedules order them (schedules.py):

        - 1F1B: rank i runs pp - i - 1 warm-up forwards, then one forward one backward, so
          min(pp - i, m) (Narayanan et al. 2021, section 2.2);
        - GPipe: all m forwards, then the backwards;
        - interleaved 1F1B: torch's `_get_warmup_ops`, 2 (pp - i - 1) + (v - 1) pp warm-up
          chunk forwards (Megatron-LM's count; pp divides m, so torch's rounds are of pp
          micro-batches), so min(2 (pp - i - 1) + (v - 1) pp + 1, m v) chunk-micro-batches
          (which chunks they are: `schedule_order.interleaved_order`);
        - zero bubble (torch's ScheduleInterleavedZeroBubble, one stage a rank: ZB-H1, Qi et
          al. 2023): rank i warms up like 1F1B but splits each backward into the input's
          (`stage_backward_input`, with retain_graph) and the weights', run i backwards later;
          a micro-batch waiting for its weight backward keeps every activation and its output
          gradients, so every rank holds min(pp, m), i of them waiting (its order walked:
          `schedule_order`). The first stage's input backward is empty and its weight backward
          a whole one, not delayed: 1F1B's memory;
        - ZBV (ScheduleZBVZeroBubble, its order walked: `schedule_order`): rank i's two chunks
          hold min(2 pp - i - 1, m) and min(i + 1, m) chunk-micro-batches at the second chunk's
          input backward (split, its weight backward right after); in the cool-down rank i runs
          2 i input backwards before their weight backwards, so it holds pp + i with 2 i of
          them waiting there (`deferred`; m >= 2 pp - 1);
        - DualPipeV (ScheduleDualPipeV, m >= 2 pp): 2 pp - i and i + 1, 2 pp + 1 together, at
          the second chunk's backward in the overlapped steady phase, which runs
          m - 2 pp + i + 1 times: run once, the first chunk has no gradient yet there;
        - DualPipe: pp + 1 (DeepSeek-V3 report, Table 2).

        When every forward runs before the rank's first backward (`drained`), no gradient exists
        while all are alive, and one micro-batch fewer is once the first backward wrote them.
        Without pipelining, one."""
        pp, m, i = self.pp, self.micro_batches, stage.index
        if pp == 1:
            return Flight(1, False, 0, 0)
        if self.schedule == "gpipe":
            return Flight(m, True, m, 0)
        if self.schedule == "interleaved_1f1b":
            v = self.virtual_stages
            warm = 2 * (pp - i - 1) + (v - 1) * pp + 1
            return Flight(min(warm, m * v), warm >= m * v, 1, 0)
        if self.schedule == "zbv":
            top, *rest = zbv_held(pp, m, i)
            return Flight(top.alive, not top.written, 1, top.waiting, True,
                          tuple(s for s in rest if s.waiting))
        if self.schedule == "dualpipev":
            return Flight(2 * pp + 1, m - 2 * pp + i + 1 < 2, 1, 0)
        if self.schedule == "dualpipe":
            return Flight(min(pp + 1, m), pp + 1 >= m, 1, 0)
        held = min(pp - i, m)
        if self.schedule == "zero_bubble" and i > 0:
            top, *rest = zero_bubble_held(pp, m, i)
            return Flight(top.alive, not top.written, 1, top.waiting, True, tuple(rest),
                          top.inputs)
        return Flight(held, pp - i >= m, held, 0)

    def held_stages(self, stage: Stage) -> tuple[tuple[int, ...], int]:
        """The pipeline stages rank `stage.index` holds, and how many the model is cut into:
        one of pp; v looped ones of pp v (interleaved 1F1B: i, i + pp, ...); two of 2 pp in a
        V (ZBV, DualPipeV: i and 2 pp - 1 - i); DualPipe's stage i and pp - 1 - i of its two
        directions (each direction's pp stages)."""
        pp, i = self.pp, stage.index
        if self.schedule == "interleaved_1f1b":
            return tuple(range(i, pp * self.virtual_stages, pp)), pp * self.virtual_stages
        if self.schedule in ("zbv", "dualpipev"):
            return (i, 2 * pp - 1 - i), 2 * pp
        if self.schedule == "dualpipe":
            return (i, pp - 1 - i), pp
        return (i,), pp

    def in_flight(self, stage: Stage) -> int:
        """Micro-batches whose activations `stage` holds at once (`flight`)."""
        return self.flight(stage).held


class Flight(NamedTuple):
    """What a pipeline rank's schedule keeps at once (`Setup.flight`)."""

    held: int  # micro-batches (of the stage's unit) whose activations are alive together
    drained: bool  # all forwards run before the first backward: no gradient while `held`
    logits: int  # of those, micro-batches whose logits the head's stage keeps
    waiting: int  # of those, micro-batches whose weight backward waits (zero bubble)
    split: bool = False  # the backward is split (zero bubble): the input's keeps the graph
    # other moments of an input backward, with weight backwards waiting and no forward between
    # (ZBV's cool-down): what the rank holds as each starts
    deferred: tuple[Held, ...] = ()
    inputs: int = 0  # a split backward's input backwards run before (`Held.inputs`)


setup = Setup  # the symbols of a resolved scenario: setup(resolved)
