"""Where each formula comes from, written once: papers, traced mechanisms, empirical constants.

Every `calc.formula.Formula` names one of these; the report's explanation, the formula
reference and the docs print them from here. `kind` says what sort of evidence it is:
`paper` (a published equation or table), `traced` (a mechanism measured in the traced PyTorch
steps of `validation/`), `code` (read from a framework's source), `empirical` (a constant
observed, not derived: labelled as such everywhere it is shown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SourceKind = Literal["paper", "traced", "code", "empirical"]


@dataclass(frozen=True, slots=True)
class Source:
    id: str
    cite: str  # how it is cited, with the section, equation or table
    kind: SourceKind
    url: str = ""
    short: str = ""  # a few words for tables ("ZeRO §3"); the id when empty

    def __str__(self) -> str:
        return self.cite


ZERO = Source(
    "zero", "Rajbhandari et al. (2020), ZeRO: Memory Optimizations Toward Training Trillion "
    "Parameter Models, section 3", "paper", "https://arxiv.org/abs/1910.02054", short="ZeRO §3")
ZERO_OFFLOAD = Source(
    "zero_offload", "Ren et al. (2021), ZeRO-Offload: Democratizing Billion-Scale Model "
    "Training, section 4; Rajbhandari et al. (2021), ZeRO-Infinity", "paper",
    "https://arxiv.org/abs/2101.06840", short="ZeRO-Offload §4")
KORTHIKANTI = Source(
    "korthikanti", "Korthikanti et al. (2022), Reducing Activation Recomputation in Large "
    "Transformer Models, Table 2", "paper", "https://arxiv.org/abs/2205.05198",
    short="Korthikanti et al., Table 2")
NARAYANAN = Source(
    "narayanan", "Narayanan et al. (2021), Efficient Large-Scale Language Model Training on GPU "
    "Clusters Using Megatron-LM, section 2.2 (1F1B)", "paper", "https://arxiv.org/abs/2104.04473",
    short="Megatron-LM 1F1B")
MEGATRON_SPLITS = Source(
    "megatron_splits", "Shoeybi et al. (2019), Megatron-LM, section 3: column- and row-parallel "
    "linears, vocabulary-parallel embedding; routed experts split by expert parallelism",
    "paper", "https://arxiv.org/abs/1909.08053", short="Megatron-LM §3")
LORA = Source(
    "lora", "Hu et al. (2021), LoRA: Low-Rank Adaptation of Large Language Models, section 4.1 "
    "(B A, A r x d_in, B d_out x r); peft keeps adapters in fp32", "paper",
    "https://arxiv.org/abs/2106.09685", short="LoRA §4.1")
PEFT_EXPERTS = Source(
    "peft_experts", "peft 0.21 with transformers v5 MoE models: `all-linear` also targets the "
    "stacked expert weights and the router by parameter (utils/transformers_weight_conversion.py "
    "`_convert_peft_config_moe`; gate and up fused into gate_up_proj at rank 2r); "
    "tuners/lora/layer.py `ParamWrapper` folds W + s B A into one baddbmm per forward "
    "(`_LoraFactorsProxy`) and refuses lora_dropout; bitsandbytes 4-bit replaces nn.Linear "
    "only, so the stacked experts and the router stay unquantised (bitsandbytes issue 1849)",
    "code", "https://github.com/huggingface/peft", short="peft ParamWrapper")
QLORA = Source(
    "qlora", "Dettmers et al. (2023), QLoRA: Efficient Finetuning of Quantized LLMs, section 3 "
    "(NF4, blocksize 64, double-quantised absmax)", "paper", "https://arxiv.org/abs/2305.14314",
    short="QLoRA §3")
ADAMW = Source(
    "adamw", "Loshchilov & Hutter (2019), Decoupled Weight Decay Regularization; torch.optim "
    "(first and second moment per parameter)", "paper", "https://arxiv.org/abs/1711.05101",
    short="AdamW")
ADAM = Source(
    "adam", "Kingma & Ba (2015), Adam: A Method for Stochastic Optimization, algorithm 1",
    "paper", "https://arxiv.org/abs/1412.6980", short="Adam")
SGD = Source("sgd", "torch.optim.SGD (momentum buffer per parameter when momentum > 0)", "code",
             "https://pytorch.org/docs/stable/generated/torch.optim.SGD.html",
    short="torch.optim.SGD")
ADAFACTOR = Source(
    "adafactor", "Shazeer & Stern (2018), Adafactor: Adaptive Learning Rates with Sublinear "
    "Memory Cost, section 3 (factored second moment; transformers' default beta1=None)",
    "paper", "https://arxiv.org/abs/1804.04235", short="Adafactor §3")
LION = Source(
    "lion", "Chen et al. (2023), Symbolic Discovery of Optimization Algorithms, algorithm 2 "
    "(one momentum per parameter)", "paper", "https://arxiv.org/abs/2302.06675", short="Lion")
BNB_8BIT = Source(
    "bnb_8bit", "Dettmers et al. (2022), 8-bit Optimizers via Block-wise Quantization; "
    "bitsandbytes bnb.optim defaults (block 256, fp32 absmax per block)", "paper",
    "https://arxiv.org/abs/2110.02861", short="bitsandbytes 8-bit")
HF_PARAMS = Source(
    "hf_params", "counted from the Hugging Face module shapes (calc/params.py); checked against "
    "transformers' own count on the meta device (validation/param_counts.py)", "code",
    short="transformers' module shapes")
HF_LOSS = Source(
    "hf_loss", "transformers' ForCausalLMLoss: logits.float(), log_softmax, nll_loss "
    "(calc/logits.py); traced: validation/cases.json", "traced", short="traced: HF loss")
LIGER = Source(
    "liger", "Liger-Kernel's fused linear cross-entropy: chunks of logits projected, softmaxed "
    "and differentiated in the forward (calc/logits.py)", "code",
    "https://github.com/linkedin/Liger-Kernel", short="Liger-Kernel")
MEGATRON_CODE = Source(
    "megatron_code", "Megatron-LM megatron/core/distributed/param_and_grad_buffer.py (the fp32 "
    "main_grad buffer) and optimizer/distrib_optimizer.py (fp32 master weights and Adam states "
    "sharded over dp): 18 bytes a parameter, 6 + 12/dp with the distributed optimizer", "code",
    "https://github.com/NVIDIA/Megatron-LM", short="Megatron-LM buffers")
TORCH_SDPA = Source(
    "torch_sdpa", "transformers 5 with SDPA on Gemma 3's sliding-window layers: masking_utils "
    "builds a (b, 1, s, s) boolean mask once s reaches the window (sdpa_mask, "
    "_ignore_causal_mask_sdpa), integrations/sdpa_attention.py repeats K and V without "
    "grouped heads under a mask (use_gqa_in_sdpa), and torch's scaled_dot_product_attention "
    "takes the memory-efficient kernel, converting the mask to an additive bias per call; "
    "traced: validation/cases.json (Gemma 3)", "traced",
    "https://github.com/huggingface/transformers", short="transformers SDPA masks")
TORCH_SAC = Source(
    "torch_sac", "torch.utils.checkpoint.create_selective_checkpoint_contexts with torchtitan's "
    "SelectiveAC policy (torchtitan/distributed/activation_checkpoint.py): save the outputs of "
    "compute-intensive ops but every second mm; traced: validation/cases.json", "traced",
    "https://github.com/pytorch/torchtitan", short="torch per-op SAC")
TRACED_ACTIVATIONS = Source(
    "traced_activations", "traced: validation/cases.json (calc/activations.py, op by op as "
    "transformers saves tensors)", "traced", short="traced: activations")
TRACED_PEAK = Source(
    "traced_peak", "traced: the live tensors at each moment of the step, validation/cases.json "
    "(calc/peak.py)", "traced", short="traced: the step's moments")
TRACED_FSDP = Source(
    "traced_fsdp", "traced: FSDP2 over 2-8 ranks, per-layer all-gather, prefetch and "
    "reduce-scatter buffers (validation/cases.json)", "traced", short="traced: FSDP2")
TRACED_OPTIMIZER_STEP = Source(
    "traced_optimizer_step", "traced: torch.optim fused, foreach and for-loop step "
    "implementations (validation/cases.json)", "traced", short="traced: optimizer steps")
TORCH_ZERO1 = Source(
    "torch_zero1", "torch.distributed.optim.ZeroRedundancyOptimizer._partition_parameters: "
    "whole parameters, largest first, each to the rank holding the fewest elements so far",
    "code", "https://github.com/pytorch/pytorch", short="ZeroRedundancyOptimizer")
DDP_BUCKETS = Source(
    "ddp_buckets", "torch DistributedDataParallel (gradient_as_bucket_view=False copies every "
    "gradient into flat buckets); DeepSpeed's reduce_bucket_size, h^2 under HF's 'auto'",
    "code", short="DDP / DeepSpeed buckets")
TRACED_DEEPSPEED = Source(
    "traced_deepspeed", "DeepSpeed 0.19.8's engine traced (validation/harness/deepspeed_engine.py): "
    "stage_1_and_2.py's copy_grads_in_partition (the partition buffer holds every tensor the "
    "rank's share touches, whole), get_grad_norm_direct (the norm in fp64) and step (the fp32 "
    "copy of the partition's gradients); stage3.py's step (the norm in fp64, then each "
    "sub-group's gradients flattened and cast to fp32)", "traced", short="traced: DeepSpeed ZeRO")
ZERO3_COORDINATOR = Source(
    "zero3_coordinator", "DeepSpeed 0.19.8, runtime/zero/partitioned_param_coordinator.py "
    "(fetch_sub_module's prefetch up to stage3_max_live_parameters, __params_to_release's "
    "reuse distance) and parameter_offload.py (persistent parameters), traced "
    "(validation/harness/deepspeed_engine.py: the coordinator's count of gathered and in-flight "
    "elements at every layer)", "traced", short="traced: ZeRO-3 coordinator")
ALLOCATOR = Source(
    "allocator", "EMPIRICAL (calc/overhead.py): the caching allocator's reserve above the "
    "allocated peak; not tensors, so not traced", "empirical", short="empirical: allocator")
CUDA_CONTEXT = Source(
    "cuda_context", "EMPIRICAL (calc/overhead.py): a CUDA context with PyTorch's kernels, about "
    "500 MiB on A100/H100 as nvidia-smi shows after torch.cuda.init()", "empirical",
    short="empirical: CUDA context")
NCCL = Source(
    "nccl", "EMPIRICAL (calc/overhead.py): NCCL's channel buffers, about 256 MiB per process "
    "group in use", "empirical", short="empirical: NCCL")
GPU_PRESETS = Source("gpu_presets", "presets/gpus: the memory the driver reports, with sources",
                     "code", short="GPU presets")
TRANSFORMER_MATH = Source(
    "transformer_math", "EleutherAI (2023), Transformer Math 101", "paper",
    "https://blog.eleuther.ai/transformer-math/", short="Transformer Math 101")
MEGATRON_THEORETICAL = Source(
    "megatron_theoretical", "Megatron-LM megatron/training/theoretical_memory_usage.py", "code",
    "https://github.com/NVIDIA/Megatron-LM", short="Megatron-LM theoretical memory")

TORCH_PIPELINING = Source(
    "torch_pipelining", "torch.distributed.pipelining stage.py (FSDP: set_reshard_after_backward"
    "(False) and set_requires_gradient_sync(False) for every backward but the last); torchtitan "
    "parallelize.py (reshard_after_forward=False when pp > 1); FSDP2 _fsdp_param.py (unsharded "
    "gradients accumulated in reduce_dtype)", "code",
    "https://github.com/pytorch/torchtitan", short="torch pipelining + FSDP2")
TORCH_SCHEDULES = Source(
    "torch_schedules", "torch.distributed.pipelining schedules.py (Schedule1F1B, ScheduleGPipe, "
    "_get_warmup_ops and _get_1f1b_rank_ops for ScheduleInterleaved1F1B and "
    "ScheduleInterleavedZeroBubble: which micro-batch each rank runs when) and _backward.py "
    "(stage_backward_input with retain_graph, stage_backward_weight); traced: "
    "validation/cases.json (pipeline cases)", "traced",
    "https://github.com/pytorch/pytorch/blob/main/torch/distributed/pipelining/schedules.py",
    short="torch pipeline schedules")
TORCH_LOSS_PARALLEL = Source(
    "torch_loss_parallel", "torch.distributed.tensor.parallel.loss_parallel (torchtitan's "
    "default with tp): cross-entropy on vocabulary-sharded DTensor logits; traced: "
    "validation/cases.json (tensor-parallel cases)", "traced",
    "https://github.com/pytorch/torchtitan", short="torch loss_parallel")
DTENSOR_EMBEDDING = Source(
    "dtensor_embedding", "torch.distributed.tensor _ops/_embedding_ops.py "
    "(embedding_dense_backward_strategy: column-wise, batch-sharded and partial strategies, none "
    "row-wise), so RowwiseParallel's Shard(0) embedding weight gets a Replicate V x h gradient; "
    "FSDP2 _fsdp_param.py (_get_grad_inner_tensor redistributes it to the weight's placement); "
    "traced: validation/cases.json (tensor-parallel cases)", "traced",
    "https://github.com/pytorch/pytorch/blob/main/torch/distributed/tensor/_ops/_embedding_ops.py",
    short="DTensor embedding backward")
EXPERT_DP = Source(
    "expert_dp", "Megatron-LM core/parallel_state.py (expert-data-parallel group: world / "
    "(expert tp x ep x pp)); DeepSpeed MoE (expert parameter groups sharded over the expert data "
    "parallel group); torchtitan (experts sharded over dp_shard x cp / ep)", "code",
    "https://github.com/NVIDIA/Megatron-LM", short="expert data parallelism")
EXPERT_UNITS = Source(
    "expert_units", "transformers distributed/fsdp.py (apply_fully_sharded_data_parallelism: "
    "the experts fully_shard on the expert-data-parallel mesh with set_gradient_divide_factor"
    "(dp), the layers resharded after forward, lm_head kept); FSDP2 _fsdp_collectives.py "
    "(foreach_reduce: on a single-rank mesh the input divided into a new tensor); traced: "
    "validation/cases.json (expert-parallel cases)", "traced",
    "https://github.com/huggingface/transformers", short="FSDP2 expert units")
VERL_FSDP = Source(
    "verl_fsdp", "verl verl/workers/fsdp_workers.py (volcengine/verl @ b178a3c): the actor's "
    "parameters (fsdp_config.param_offload) and optimizer (optimizer_offload) offloaded before "
    "the rollout engine resumes and loaded for update_actor, the critic's likewise; every role "
    "but the actor (reference, reward model) wrapped with FSDP CPU offload; critic and reward "
    "model built with num_labels = 1", "code", "https://github.com/volcengine/verl",
    short="verl FSDP workers")
OPENRLHF = Source(
    "openrlhf", "OpenRLHF (OpenRLHF/OpenRLHF @ 3c3be62) openrlhf/utils/deepspeed/"
    "deepspeed_utils.py: offload_deepspeed_states (--ds.enable_sleep) moves optimizer states, "
    "fp32 weights and gradients, not the bf16 parameters; openrlhf/models/model.py: the critic's "
    "and reward model's value_head = Linear(hidden_size, 1, bias=False)", "code",
    "https://github.com/OpenRLHF/OpenRLHF", short="OpenRLHF")

SOURCES: dict[str, Source] = {s.id: s for s in (
    ZERO, ZERO_OFFLOAD, KORTHIKANTI, NARAYANAN, MEGATRON_SPLITS, LORA, PEFT_EXPERTS, QLORA, ADAMW,
    ADAM, SGD, ADAFACTOR, LION, BNB_8BIT, HF_PARAMS, HF_LOSS, LIGER, MEGATRON_CODE, TORCH_SAC, TRACED_ACTIVATIONS, TRACED_PEAK,
    TRACED_FSDP, TRACED_OPTIMIZER_STEP, TORCH_ZERO1, DDP_BUCKETS, ALLOCATOR, CUDA_CONTEXT, NCCL, GPU_PRESETS,
    TRANSFORMER_MATH, MEGATRON_THEORETICAL, EXPERT_DP, TORCH_PIPELINING, TORCH_SCHEDULES,
    TORCH_LOSS_PARALLEL, DTENSOR_EMBEDDING, EXPERT_UNITS, VERL_FSDP, OPENRLHF)}
"""Every source by id: the docs' bibliography lists them from here."""
