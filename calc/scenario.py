"""The scenario: the public input contract (model, training, parallelism, GPU).

Field names are stable and documented; `schema_version` lets saved scenarios and share links
survive later changes (older versions are migrated, newer ones rejected with a clear message).

Validation happens in two layers. The pydantic models check each field on its own (types,
ranges, enumerations). `resolve` then checks the combination against the architecture and
the GPU (TP must divide the heads, PP cannot exceed the layers, bf16 needs Ampere...). Impossible
settings raise `ScenarioError` naming the field; pointless ones (ZeRO with one data-parallel
rank) become warnings in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .architecture import Architecture, ConfigError, from_hf_config
from .errors import FieldError, rule
from .numerics import numerics_for
from .optimizers import OPTIMIZERS, OptimizerId, OptimizerImpl
from .params import adapted, count_params, lora_targets_of
from .presets import GpuPreset, ModelPreset, UnknownPreset, resolve_gpu, resolve_model
from .reading import InputError, check_depth, decode, read_json

SCHEMA_VERSION = 1

Precision = Literal["fp32", "bf16", "fp16", "fp8"]
MixedPrecision = Literal["pure", "amp", "master", "autocast"]
Optimizer = OptimizerId
Checkpointing = Literal["none", "selective", "full"]
SelectivePolicy = Literal["ops", "attention"]
Attention = Literal["flash", "eager"]
Loss = Literal["standard", "chunked"]
Finetuning = Literal["full", "lora", "qlora"]
LoraTargets = Literal["all_linear", "attention", "query_value"]  # query_value: peft's Llama default
Implementation = Literal["hf", "megatron"]
PipelineSchedule = Literal["1f1b", "interleaved_1f1b", "gpipe", "zero_bubble", "zbv", "dualpipev",
                           "dualpipe"]
SPLIT_SCHEDULES = ("zero_bubble", "zbv", "dualpipev")  # torch splits some backwards in two
V_SCHEDULES = ("zbv", "dualpipev")  # two stages a rank in a V: i and 2 pp - 1 - i of 2 pp
Framework = Literal["torch", "deepspeed"]

_BIG = 1 << 22  # a bound on counts that catches typos without limiting real runs
_ELEMENTS = 10**15  # a bound on element counts (DeepSpeed's sizes)


class _Strict(BaseModel):
    # strict: an integer field takes an integer, not true or " 8 "; no NaN or infinity
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Training(_Strict):
    """How the model is trained. Every field has a default."""

    micro_batch_size: int = Field(default=1, ge=1, le=_BIG, description="sequences per GPU per micro-batch")
    seq_len: int = Field(default=4096, ge=1, le=1 << 24, description="tokens per sequence")
    gradient_accumulation_steps: int = Field(default=1, ge=1, le=_BIG)
    precision: Precision = "bf16"
    mixed_precision: MixedPrecision = Field(
        default="amp", description="amp unless finetuning is lora or qlora, then autocast")
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "fused"
    activation_checkpointing: Checkpointing = "none"
    selective_policy: SelectivePolicy | None = Field(
        default=None, description="with selective checkpointing: ops (torch's per-op policy, as "
        "torchtitan) or attention (Megatron's core-attention recompute); by implementation")
    recompute_layers: int | None = Field(
        default=None, ge=1, description="with full checkpointing: only the first N layers of each stage"
    )
    checkpoint_every: int | None = Field(
        default=None, ge=1, le=_BIG,
        description="with full checkpointing: every Nth layer (layers 0, N, 2N...)")
    attention: Attention = "flash"
    loss: Loss = "standard"
    finetuning: Finetuning = "full"
    lora_rank: int = Field(default=16, ge=1, le=1 << 16)
    lora_targets: LoraTargets = "all_linear"
    lora_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    implementation: Implementation = Field(
        default="hf",
        description="whose kernels: Hugging Face transformers (eager PyTorch) or Megatron-LM",
    )
    padded: bool = Field(
        default=False,
        description="the batches carry padding (an attention mask, as unpacked fine-tuning "
        "data gives): transformers' SDPA then masks every layer, so the memory-efficient kernel "
        "runs, keeping the mask as a bias and K/V repeated to every head")
    moe_capacity_factor: float | None = Field(
        default=None, gt=0.0, le=64.0,
        description="MoE, implementation megatron: each expert's buffer holds this times its "
        "mean share of tokens (padded to capacity); none: dropless")
    moe_load_imbalance: float = Field(
        default=1.0, ge=1.0, le=4096.0,
        description="MoE with ep > 1, dropless: tokens the busiest expert-parallel rank receives "
        "over the mean")

    @model_validator(mode="before")
    @classmethod
    def _adapter_default_precision(cls, data: Any) -> Any:
        """LoRA and QLoRA load the base in `precision` and train under autocast unless
        mixed_precision says otherwise (PEFT with Trainer(bf16=True))."""
        if isinstance(data, dict) and "mixed_precision" not in data \
                and data.get("finetuning") in ("lora", "qlora"):
            return {**data, "mixed_precision": "autocast"}
        return data

    @property
    def policy(self) -> SelectivePolicy | None:
        """The selective policy in effect: as asked, else by implementation."""
        if self.activation_checkpointing != "selective":
            return None
        return self.selective_policy or ("attention" if self.implementation == "megatron"
                                         else "ops")


def engine_of(framework: Framework | None, mixed_precision: str) -> Framework:
    """The framework in effect: as asked, else DeepSpeed for master weights (its bf16
    optimizer keeps the fp32 copy), torch otherwise."""
    return framework or ("deepspeed" if mixed_precision == "master" else "torch")


# DeepSpeed's zero_optimization sizes a scenario can set (Parallelism), the first at any stage
ZERO_SIZES = ("reduce_bucket_size", "stage3_prefetch_bucket_size",
              "stage3_param_persistence_threshold", "stage3_max_live_parameters",
              "stage3_max_reuse_distance", "sub_group_size")


class Parallelism(_Strict):
    """How the job is split across GPUs. World size is dp x tp x pp x cp."""

    dp: int = Field(default=1, ge=1, le=1 << 20)
    tp: int = Field(default=1, ge=1, le=4096)
    pp: int = Field(default=1, ge=1, le=4096)
    cp: int = Field(default=1, ge=1, le=4096)
    ep: int = Field(default=1, ge=1, le=4096)
    zero: int = Field(default=0, ge=0, le=3)
    sequence_parallel: bool = False
    offload_optimizer: bool = False
    offload_params: bool = False
    pipeline_schedule: PipelineSchedule = Field(
        default="1f1b", description="with pp > 1: which micro-batches a stage holds at once; "
        "torch.distributed.pipelining's Schedule1F1B, ScheduleInterleaved1F1B, ScheduleGPipe, "
        "ScheduleInterleavedZeroBubble (one stage a rank), ScheduleZBVZeroBubble and "
        "ScheduleDualPipeV (two stages a rank in a V), or DeepSeek's bidirectional DualPipe")
    virtual_stages: int = Field(default=1, ge=1, le=64,
                                description="model chunks per pipeline rank (interleaved_1f1b)")
    framework: Framework | None = Field(
        default=None, description="whose data parallelism and ZeRO: torch (DDP, "
        "ZeroRedundancyOptimizer, FSDP2) or DeepSpeed's engine; by default DeepSpeed with "
        "mixed_precision master, else torch")
    # DeepSpeed's zero_optimization sizes, in elements (None: what the HF Trainer's "auto"
    # fills, or DeepSpeed's default; calc.coordinator.zero_sizes)
    reduce_bucket_size: int | None = Field(
        default=None, ge=1, le=_ELEMENTS, description="DeepSpeed ZeRO: elements a gradient "
        "reduce bucket holds; by default h^2 (the HF Trainer's auto)")
    stage3_prefetch_bucket_size: int | None = Field(
        default=None, ge=0, le=_ELEMENTS, description="DeepSpeed ZeRO-3: elements prefetched "
        "at a time (0: no prefetch); by default 0.9 h^2")
    stage3_param_persistence_threshold: int | None = Field(
        default=None, ge=0, le=_ELEMENTS, description="DeepSpeed ZeRO-3: parameters of at "
        "most this many elements stay whole on every GPU; by default 10 h")
    stage3_max_live_parameters: int | None = Field(
        default=None, ge=1, le=_ELEMENTS, description="DeepSpeed ZeRO-3: the coordinator "
        "prefetches while fewer elements than this are gathered; by default 1e9")
    stage3_max_reuse_distance: int | None = Field(
        default=None, ge=0, le=_ELEMENTS, description="DeepSpeed ZeRO-3: a released module's "
        "parameters stay gathered where used again within this many elements; by default 1e9")
    sub_group_size: int | None = Field(
        default=None, ge=1, le=_ELEMENTS, description="DeepSpeed ZeRO-3: gradient elements "
        "the step casts to fp32 at a time; by default 1e9")

    @field_validator(*ZERO_SIZES, mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        """DeepSpeed's sizes as its configs write them: 1e9 is a whole number of elements."""
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    def engine(self, mixed_precision: str) -> Framework:
        return engine_of(self.framework, mixed_precision)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_group(self) -> int:
        """Ranks that ZeRO/FSDP shard over: data parallel times context parallel."""
        return self.dp * self.cp

    def zero_in_effect(self, t: Training) -> int:
        """The ZeRO stage the job runs. Over several ranks, or with offload (ZeRO-Offload's
        first use is one GPU), the stage asked for; on one rank, the stage where something
        still wraps the model: DeepSpeed's engine at any stage, FSDP at stages 2-3 (as
        Accelerate launches it on one GPU), unless a tp or pp mesh leaves data parallelism
        out (torchtitan shards only a dimension with ranks) or Megatron-LM trains it (its
        distributed optimizer over one rank is the plain one); else 0 (torch's
        ZeroRedundancyOptimizer on one rank is the plain optimizer)."""
        if self.shard_group > 1 or self.offload_optimizer or self.offload_params:
            return self.zero
        if t.implementation != "hf" or self.tp > 1 or self.pp > 1:
            return 0
        wrapped = 1 if self.engine(t.mixed_precision) == "deepspeed" else 2
        return self.zero if self.zero >= wrapped else 0

    def one_rank_wrapper(self, t: Training) -> bool:
        """ZeRO in effect on one rank without offload: nothing sharded, the wrapper's buffers
        (`zero_in_effect`)."""
        return (self.shard_group == 1 and not (self.offload_optimizer or self.offload_params)
                and self.zero_in_effect(t) > 0)


class HFConfigSource(_Strict):
    """A pasted Hugging Face `config.json` (unknown keys inside it are ignored)."""

    hf_config: dict[str, Any]


def _pick_model_kind(value: Any) -> Any:
    if isinstance(value, str | HFConfigSource | Architecture):
        return value
    if isinstance(value, dict):
        if "hf_config" in value:
            return HFConfigSource.model_validate(value)
        return Architecture.model_validate(value)
    raise ValueError(
        "must be a preset id (string), {\"hf_config\": {...}} or an architecture object"
    )


ModelSpec = Annotated[str | HFConfigSource | Architecture, Field(union_mode="left_to_right")]


class Scenario(_Strict):
    """One training configuration to estimate."""

    schema_version: Literal[1] = 1
    model: ModelSpec
    training: Training = Training()
    parallelism: Parallelism = Parallelism()
    gpu: str = "h100-sxm-80gb"

    @field_validator("model", mode="before")
    @classmethod
    def _pick_model(cls, value: Any) -> Any:
        return _pick_model_kind(value)


# ---------------------------------------------------------------------------------------------
# Errors and warnings
# ---------------------------------------------------------------------------------------------

class ScenarioError(FieldError):
    """Bad input: `field` is the dotted path (`training.seq_len`), `message` the rule broken."""


@dataclass(frozen=True, slots=True)
class EstimateWarning:
    """A setting that is allowed but does nothing, or a caveat about the estimate."""

    code: str
    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "field": self.field, "message": self.message}


# ---------------------------------------------------------------------------------------------
# Parsing and migration
# ---------------------------------------------------------------------------------------------

MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""`MIGRATIONS[n]` turns a version-n scenario dict into version n+1. None exist yet."""


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ScenarioError("schema_version", f"must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise ScenarioError(
            "schema_version",
            f"{version} is newer than this calc understands ({SCHEMA_VERSION}); upgrade calc",
        )
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
    return {**data, "schema_version": SCHEMA_VERSION}


def scenario_dict(text: str | bytes) -> dict[str, Any]:
    """The JSON object in `text` (UTF-8, bounded in size and nesting, no repeated keys), or a
    `ScenarioError` saying why it is not one."""
    try:
        data = read_json(decode(text))
    except InputError as exc:
        raise ScenarioError("scenario", exc.message) from None
    if not isinstance(data, dict):
        raise ScenarioError("scenario", "must be a JSON object")
    return data


def parse_scenario(data: dict[str, Any] | str | bytes | Scenario) -> Scenario:
    """Validate a scenario from a dict or JSON text; raise `ScenarioError` on bad input."""
    if isinstance(data, Scenario):
        return data
    if isinstance(data, str | bytes):
        data = scenario_dict(data)
    if not isinstance(data, dict):
        raise ScenarioError("scenario", "must be a JSON object")
    if isinstance(data.get("model"), dict):  # a pasted config.json: any JSON at all
        try:
            check_depth(data["model"])
        except InputError as exc:
            raise ScenarioError("model", exc.message) from None
    data = migrate(data)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise _scenario_error(exc) from None


def _scenario_error(exc: ValidationError) -> ScenarioError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    # Drop pydantic's union-branch labels ("str", "Architecture", "function-before[...]").
    loc = [p for p in loc if not (p[:1].isupper() or p.startswith(("function-", "str")))]
    return ScenarioError(".".join(loc) or "scenario", rule(err))


def normalize_scenario(data: dict[str, Any] | str | bytes | Scenario) -> dict[str, Any]:
    """The complete scenario JSON: every default filled in, preset and GPU aliases replaced by
    their ids, and the combination checked (what a form or a share link should hold).

    >>> normalize_scenario({"model": "Meta-Llama/Meta-Llama-3-8B", "gpu": "H100"})["gpu"]
    'h100-sxm-80gb'
    """
    resolved = resolve(parse_scenario(data))
    out = resolved.scenario.model_dump(mode="json")
    if resolved.preset is not None:
        out["model"] = resolved.preset.id
    out["gpu"] = resolved.gpu.id
    return out


# ---------------------------------------------------------------------------------------------
# Resolution: presets, architecture, cross-field rules
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Resolved:
    """A scenario with its architecture and GPU looked up and its combination checked."""

    scenario: Scenario
    arch: Architecture
    gpu: GpuPreset
    preset: ModelPreset | None
    warnings: tuple[EstimateWarning, ...] = field(default=())

    @property
    def training(self) -> Training:
        return self.scenario.training

    @property
    def parallelism(self) -> Parallelism:
        return self.scenario.parallelism


def resolve(scenario: Scenario) -> Resolved:
    """Look up presets and check the combination; raise `ScenarioError` if impossible."""
    warnings: list[EstimateWarning] = []
    preset: ModelPreset | None = None
    spec = scenario.model
    try:
        if isinstance(spec, str):
            preset = resolve_model(spec)
            arch = preset.architecture()
        elif isinstance(spec, HFConfigSource):
            arch, notes = from_hf_config(spec.hf_config)
            warnings += [EstimateWarning("hf_config_read", "model.hf_config", n) for n in notes]
        else:
            arch = spec
    except UnknownPreset as exc:
        raise ScenarioError("model", str(exc)) from None
    except ConfigError as exc:
        raise ScenarioError(f"model.{exc.field}", exc.message) from None
    try:
        gpu = resolve_gpu(scenario.gpu)
    except UnknownPreset as exc:
        raise ScenarioError("gpu", str(exc)) from None
    warnings += _check(scenario, arch, gpu)
    return Resolved(scenario, arch, gpu, preset, tuple(warnings))


def lora_experts_unhooked(arch: Architecture, t: Training, p: Parallelism) -> bool:
    """LoRA on the routed experts of a MoE block DeepSpeed's ZeRO-3 does not hook as one leaf
    (DeepSeek-V3's), under its engine: its coordinator stops at the second step (traced)."""
    return (t.finetuning != "full" and arch.is_moe and not arch.traits.moe_leaf
            and "experts" in lora_targets_of(t.lora_targets, arch)
            and p.zero == 3 and p.dp > 1
            and engine_of(p.framework, t.mixed_precision) == "deepspeed")


def selective_autocast_pipeline(t: Training, p: Parallelism) -> bool:
    """torch's per-op selective checkpointing under a pipeline schedule with autocast's weight
    copies and more than one micro-batch: torch.utils.checkpoint raises in the step (traced,
    torch 2.13), so no step exists to check the figure against."""
    return (t.policy == "ops" and p.pp > 1 and t.gradient_accumulation_steps > 1
            and numerics_for(t.precision, t.mixed_precision, p.zero_in_effect(t),
                             p.engine(t.mixed_precision) == "deepspeed").weight_copies)


def framework_problem(precision: str, mixed_precision: str, implementation: str,
                      p: Parallelism) -> str | None:
    """Why `p.framework` cannot train this precision (a rule of `parallelism.framework`), or
    None; the advisor asks it before laying out a combination."""
    if p.framework == "torch" and mixed_precision == "master":
        return ("torch's DDP, ZeroRedundancyOptimizer and FSDP2 keep no separate fp32 master "
                "copy: use mixed_precision amp, or framework deepspeed")
    if p.framework != "deepspeed":
        return None
    if implementation == "megatron":
        return ("implementation megatron runs Megatron-LM's own data parallelism and "
                "distributed optimizer: leave framework out")
    if mixed_precision not in ("master", "amp") and precision != "fp32":
        return (f"DeepSpeed is modelled with mixed_precision master (its bf16/fp16 mode) or "
                f"amp (its torch_autocast), not {mixed_precision}")
    return None


def cp_over_sliding_window(arch: Architecture, t: Training, cp: int) -> bool:
    """Context parallelism (torch's ring attention: is_causal, no mask) over sliding-window
    layers that the sequence reaches, which need a mask: the step fails where each rank's shard
    reaches the window, and runs as causal attention, the window ignored, where it does not."""
    window = arch.sliding_window
    return (cp > 1 and t.implementation == "hf" and window is not None
            and bool(arch.sliding_layers) and t.seq_len >= window)


def _check(s: Scenario, arch: Architecture, gpu: GpuPreset) -> list[EstimateWarning]:
    t, p = s.training, s.parallelism
    out: list[EstimateWarning] = []

    def fail(field: str, message: str) -> None:
        raise ScenarioError(field, message)

    def warn(code: str, field: str, message: str) -> None:
        out.append(EstimateWarning(code, field, message))

    # Hardware: a dtype the chip cannot compute in is impossible, not slow.
    if t.precision not in gpu.dtypes:
        fail("training.precision", f"{gpu.name} does not support {t.precision} "
             f"(supported: {', '.join(gpu.dtypes)})")
    # Parallel splits must divide what they split.
    heads, kv = arch.num_attention_heads, arch.kv_heads
    if heads % p.tp:
        fail("parallelism.tp", f"tp ({p.tp}) must divide num_attention_heads ({heads})")
    if not arch.is_mla and kv % p.tp:
        fail("parallelism.tp", f"tp ({p.tp}) must divide num_key_value_heads ({kv})")
    if p.pp > arch.num_hidden_layers:
        fail("parallelism.pp", f"pp ({p.pp}) cannot exceed num_hidden_layers "
             f"({arch.num_hidden_layers})")
    if p.pp == 1 and (p.pipeline_schedule != "1f1b" or p.virtual_stages > 1):
        fail("parallelism.pipeline_schedule" if p.pipeline_schedule != "1f1b" else
             "parallelism.virtual_stages", "needs pp > 1")
    if (p.pipeline_schedule == "interleaved_1f1b") != (p.virtual_stages > 1):
        fail("parallelism.virtual_stages", "must be at least 2 with pipeline_schedule "
             "interleaved_1f1b, and 1 with any other schedule")
    if p.pp * p.virtual_stages > arch.num_hidden_layers:
        fail("parallelism.virtual_stages", f"pp x virtual_stages ({p.pp * p.virtual_stages}) "
             f"cannot exceed num_hidden_layers ({arch.num_hidden_layers})")
    if p.pipeline_schedule in V_SCHEDULES and 2 * p.pp > arch.num_hidden_layers:
        fail("parallelism.pp", f"{p.pipeline_schedule} cuts the model in 2 x pp stages "
             f"({2 * p.pp}), more than num_hidden_layers ({arch.num_hidden_layers})")
    if p.pipeline_schedule == "dualpipev" and t.gradient_accumulation_steps < 2 * p.pp:
        fail("training.gradient_accumulation_steps", "DualPipeV needs at least as many "
             f"micro-batches as stages, 2 x pp ({2 * p.pp}), as torch's ScheduleDualPipeV "
             "requires")
    if p.pipeline_schedule == "interleaved_1f1b" and t.gradient_accumulation_steps % p.pp:
        fail("training.gradient_accumulation_steps", "with interleaved_1f1b the micro-batches "
             f"({t.gradient_accumulation_steps}) must be a multiple of pp ({p.pp}), as "
             "Megatron-LM requires")
    if p.pipeline_schedule == "dualpipe" and p.pp % 2:
        fail("parallelism.pp", f"DualPipe needs an even pp, got {p.pp}")
    if t.seq_len % p.cp:
        fail("training.seq_len", f"seq_len ({t.seq_len}) must be divisible by cp ({p.cp})")
    if p.sequence_parallel and t.seq_len % (p.tp * p.cp):
        fail("training.seq_len", f"with sequence_parallel, seq_len ({t.seq_len}) must be "
             f"divisible by tp x cp ({p.tp * p.cp})")
    if p.ep > 1:
        if not arch.is_moe:
            warn("ep_without_experts", "parallelism.ep", "ep > 1 does nothing for a dense model")
        elif arch.num_local_experts % p.ep:
            fail("parallelism.ep", f"ep ({p.ep}) must divide the number of experts "
                 f"({arch.num_local_experts})")
        if p.shard_group % p.ep:
            fail("parallelism.ep", f"ep ({p.ep}) must divide dp x cp ({p.shard_group}): experts "
                 "are split within the data-parallel group")
    if not arch.is_moe and (t.moe_capacity_factor is not None or t.moe_load_imbalance != 1.0):
        warn("moe_without_experts", "training.moe_capacity_factor" if t.moe_capacity_factor
             is not None else "training.moe_load_imbalance", "does nothing for a dense model")
    if t.moe_capacity_factor is not None and t.implementation == "hf":
        fail("training.moe_capacity_factor", "transformers' MoE layers are dropless: a capacity "
             "factor needs implementation megatron")
    if t.moe_load_imbalance > p.ep:
        fail("training.moe_load_imbalance", f"cannot exceed ep ({p.ep}): the busiest rank "
             "receives at most every token")
    # Checkpointing.
    if t.selective_policy is not None and t.activation_checkpointing != "selective":
        fail("training.selective_policy", "needs activation_checkpointing = selective")
    if t.policy == "ops" and t.implementation == "megatron":
        fail("training.selective_policy", "Megatron-LM's selective recompute is the core "
             "attention: use attention (or implementation hf for torch's per-op policy)")
    if t.policy == "attention" and t.attention == "flash" and t.implementation == "hf":
        warn("selective_attention_flash", "training.selective_policy",
             "with flash attention the attention core saves only its output and logsumexp: "
             "recomputing it saves nothing (use ops, torch's per-op policy)")
    if t.policy == "ops" and p.pipeline_schedule in SPLIT_SCHEDULES and p.pp > 1:
        fail("training.selective_policy" if t.selective_policy else
             "training.activation_checkpointing",
             f"torch's per-op selective checkpointing cannot run under {p.pipeline_schedule}: its "
             "split backward's weight pass recomputes each layer again after the input's "
             "backward, and torch refuses a second backward through a selectively checkpointed "
             "region ('Trying to backward an extra time', traced, torch 2.13); use full "
             "checkpointing, or a schedule without a split backward (1f1b, interleaved_1f1b)")
    if selective_autocast_pipeline(t, p):
        warn("selective_autocast_pipeline", "training.selective_policy",
             "torch's per-op selective checkpointing fails under a pipeline schedule with "
             "autocast: a later micro-batch's forward takes the weights' cast copies from "
             "autocast's cache, its recomputation casts them anew once a backward emptied "
             "the cache, and torch.utils.checkpoint raises 'aten._to_copy ... not found in "
             "storage' (traced, torch 2.13): use full checkpointing, or FSDP2's mixed "
             "precision (zero 2 or 3)")
    if t.checkpoint_every is not None:
        if t.activation_checkpointing != "full":
            fail("training.checkpoint_every", "needs activation_checkpointing = full")
        if t.recompute_layers is not None:
            fail("training.checkpoint_every", "choose recompute_layers (the first N layers) or "
                 "checkpoint_every (every Nth layer), not both")
    if t.recompute_layers is not None:
        if t.activation_checkpointing != "full":
            fail("training.recompute_layers", "needs activation_checkpointing = full")
        per_stage = -(-arch.num_hidden_layers // p.pp)
        if t.recompute_layers > per_stage:
            fail("training.recompute_layers", f"({t.recompute_layers}) exceeds the layers per "
                 f"pipeline stage ({per_stage})")
    # Sequence length beyond what the model can index.
    if t.seq_len > arch.max_position_embeddings:
        if arch.traits.learned_positions:
            fail("training.seq_len", f"({t.seq_len}) exceeds max_position_embeddings "
                 f"({arch.max_position_embeddings}), the size of the learned position table")
        warn("seq_len_beyond_positions", "training.seq_len",
             f"seq_len {t.seq_len} exceeds max_position_embeddings "
             f"({arch.max_position_embeddings}); memory is estimated, quality is not")
    # Sharding and offload.
    problem = framework_problem(t.precision, t.mixed_precision, t.implementation, p)
    if problem:
        fail("parallelism.framework", problem)
    if p.zero and p.shard_group == 1:
        wrapper = "DeepSpeed's engine" if p.engine(t.mixed_precision) == "deepspeed" else "FSDP"
        warn("zero_without_dp", "parallelism.zero",
             "ZeRO shards over dp x cp, which is 1: nothing is sharded"
             + (" (offload still applies)" if p.offload_optimizer or p.offload_params else
                f", but {wrapper} still wraps the model and its buffers are counted (zero 0 "
                "leaves them out)" if p.one_rank_wrapper(t) else ""))
    for name in ZERO_SIZES:
        if getattr(p, name) is None:
            continue
        if p.engine(t.mixed_precision) != "deepspeed" or p.zero == 0:
            fail(f"parallelism.{name}", "a DeepSpeed ZeRO size: needs DeepSpeed's engine "
                 "(framework deepspeed, or mixed_precision master) and zero >= 1")
        if name != "reduce_bucket_size" and p.zero != 3:
            fail(f"parallelism.{name}", "a ZeRO-3 size: needs zero = 3")
    if p.offload_optimizer and p.zero == 0:
        fail("parallelism.offload_optimizer", "needs zero >= 1 (ZeRO-Offload of the sharded "
             "optimizer)")
    if p.offload_params and p.shard_group == 1 and p.tp * p.pp > 1 \
            and p.engine(t.mixed_precision) != "deepspeed":
        fail("parallelism.offload_params", "parameter offload is FSDP2's CPUOffloadPolicy, and a "
             "tp or pp mesh shards data parallelism only where it has ranks (torchtitan): needs "
             "dp x cp > 1 beside tp or pp")
    if p.offload_params and p.zero < 3:
        warn("offload_params_below_zero3", "parallelism.offload_params",
             "parameter offload needs ZeRO-3; ignored")
    if p.sequence_parallel and p.tp == 1:
        warn("sequence_parallel_without_tp", "parallelism.sequence_parallel",
             "sequence parallelism splits over tp, which is 1: nothing changes")
    if p.tp > 1 and t.implementation == "hf":
        warn("tp_implementation", "parallelism.tp",
             "tensor parallelism is modelled Megatron-style (column/row parallel linears)")
    if (not gpu.sdpa_flash and t.attention == "flash" and t.implementation == "hf"
            and not t.padded and not arch.traits.sinks and not arch.is_mla
            and 0 < arch.kv_heads < arch.num_attention_heads):
        warn("sdpa_math", "training.attention",
             f"{gpu.name} ({gpu.architecture}) has no flash kernel for SDPA (sm80 and newer), "
             "and its memory-efficient kernel takes no grouped K/V heads: with "
             f"{arch.num_attention_heads} query and {arch.kv_heads} K/V heads transformers' SDPA "
             "runs the math kernel, which keeps the fp32 probabilities, b a s^2 x 4 bytes a "
             "layer (computed so; a masked layer, sliding or padded, whose mask makes "
             "transformers repeat K/V, runs the memory-efficient kernel instead: set padded "
             "to compare)")
    if t.padded and p.cp > 1 and t.implementation == "hf":
        fail("training.padded", "torch's context parallelism takes no attention mask (its "
             "ring attention runs is_causal): pack the sequences, or set parallelism.cp to 1")
    if cp_over_sliding_window(arch, t, p.cp):
        window = arch.sliding_window or 0  # (set where cp_over_sliding_window holds)
        fails = t.seq_len // p.cp >= window  # (each rank masks its own shard)
        warn("cp_sliding_window", "parallelism.cp",
             f"torch's context parallelism takes no attention mask (its ring attention runs "
             f"is_causal), and {arch.model_type}'s sliding-window layers need one from "
             f"{window} tokens on: "
             + ("with each rank's shard that long the step fails (traced: Phi-3 at 4K tokens "
                "under cp 2)" if fails else
                "each rank's shard is shorter, so the step runs, but as causal attention over "
                "the whole sequence, the window ignored (traced: Phi-3 at 4K tokens under cp 4)")
             + "; computed here as causal attention")
    if t.padded and t.implementation == "megatron":
        warn("padded_megatron", "training.padded",
             "Megatron-LM's kernels take no padding mask: ignored")
    if arch.traits.sinks and t.attention == "flash" and t.implementation == "hf":
        warn("sinks_flash", "training.attention",
             f"transformers' SDPA refuses {arch.model_type}'s attention sinks: flash means the "
             "Hub kernel kernels-community/vllm-flash-attn3 (Hopper GPUs, bf16/fp16), computed "
             "as flash attention; without it transformers runs eager attention, whose scores "
             "keep b a s (s + 1) elements a layer (set attention to eager)")
    # Precision modes that collapse.
    if t.precision == "fp32" and t.mixed_precision != "pure":
        warn("mixed_precision_fp32", "training.mixed_precision",
             "with precision fp32 there is nothing to mix: computed as pure fp32")
    if t.finetuning != "full":
        counts = count_params(arch)
        targets = lora_targets_of(t.lora_targets, arch)
        # (not the routers: peft adapts them as a side effect of `all-linear`, at any rank)
        sizes = [min(lin.in_features, lin.out_features)
                 for layer in (counts.dense_layer, counts.moe_layer) if layer is not None
                 for lin in layer.linears if adapted(lin, targets) and lin.group != "router"]
        if not sizes:
            fail("training.lora_targets", f"'{t.lora_targets}' adapts no projection of this "
                 f"{arch.model_type} model")
        if t.lora_rank > min(sizes):
            fail("training.lora_rank", f"({t.lora_rank}) exceeds the smallest dimension of an "
                 f"adapted projection ({min(sizes)}): the adapter would be larger than the "
                 "weight it adapts")
        if "experts" in targets:
            warn("lora_folds_experts", "training.lora_targets",
                 "peft adapts the routed experts by folding B A into their stacked weights each "
                 "forward: every MoE layer keeps that whole copy until its backward (see "
                 "activations/lora); lora_targets attention, or activation checkpointing, "
                 "avoids it")
        if lora_experts_unhooked(arch, t, p):
            warn("lora_experts_zero3", "training.lora_targets",
                 "DeepSpeed's ZeRO-3 stops at the second step with LoRA on the routed experts of "
                 f"a {arch.model_type} MoE block, which it does not hook as one leaf: peft's "
                 "ParamWrapper reaches the experts' weights outside the order its coordinator "
                 "recorded (traced, DeepSpeed 0.19.8: RuntimeError 'tracing error'). Mark the "
                 "block a leaf (deepspeed.utils.set_z3_leaf_modules), or set lora_targets to "
                 "attention; computed as if it ran unchanged")
        if t.lora_dropout and "experts" in targets:
            warn("lora_dropout_experts", "training.lora_dropout",
                 "peft adapts the routed experts and the router by parameter, which refuses "
                 "lora_dropout > 0 (ValueError in ParamWrapper): set it to 0, or lora_targets "
                 "to attention; computed without dropout on those adapters")
    if t.finetuning == "full" and t.lora_dropout:
        warn("lora_field_unused", "training.lora_dropout", "ignored without LoRA")
    if not OPTIMIZERS[t.optimizer].implementations and "optimizer_impl" in t.model_fields_set:
        warn("optimizer_impl_unused", "training.optimizer_impl",
             f"{t.optimizer} has one implementation; optimizer_impl is ignored")
    return out
