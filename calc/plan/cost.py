r"""Time and cost of training: FLOPs per step, step time at an assumed utilisation, $.

FLOPs per token (training: forward + backward), the usual dense-transformer count:

\[
C_{token} = 6 N + 6 L H (d_{qk} + d_v) T
\]

- \(N\): weights that take part in a matmul for each token: the decoder layers' linear
  weights (routed experts counted top-k, as a token passes through them) plus the output head
  (\(h V\), tied or not). Norms, biases and the embedding lookup are not matmuls.
  Kaplan et al. (2020), "Scaling Laws for Neural Language Models", section 2.1: 2N per token
  forward, twice that backward.
- Attention scores and their use: per layer and token \(2 H d_{qk} T\) for
  \(QK^\top\) and \(2 H d_v T\) for \(AV\) forward, 3x for training.
  With \(d_{qk} = d_v = Q\) this is the \(12 L H Q T\) of Chowdhery et al. (2022),
  "PaLM", appendix B (no saving for the causal mask counted, as there). \(L\) layers,
  \(H\) query heads, \(T\) = seq_len; MLA: \(d_{qk}\) = qk_nope + qk_rope.
- LoRA / QLoRA: the frozen base runs forward (2N) and computes input gradients (2N) but no
  weight gradients, so 4N instead of 6N; the adapters cost 6 x their parameters.

Recomputation (executed, not model, FLOPs; Korthikanti et al. (2022), "Reducing Activation
Recomputation in Large Transformer Models", section 4): full checkpointing runs the forward of
each checkpointed layer again (\(2N_{layers} + 2LH(d_{qk}+d_v)T\) times the checkpointed
fraction); selective runs the attention core again (\(2LH(d_{qk}+d_v)T\)).

Step time = executed FLOPs per step / (GPUs x dense peak TFLOPS x `mfu`), with the GPU
preset's dense (non-sparse) rate for the training precision. `mfu` is the fraction of peak the
job sustains on the FLOPs it executes: without recomputation this is PaLM's model FLOPs
utilisation (appendix B; ~0.4 is typical of well-tuned large jobs), with recomputation PaLM's
hardware FLOPs utilisation; the report gives the MFU that results. Pipeline bubbles,
communication and data loading are not modelled apart: they are what `mfu` absorbs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from ..architecture import Architecture
from ..estimate import estimate
from ..operations import SCENARIO_HELP, Cli, Operation, Request
from ..params import count_params
from ..presets import HardwareDtype
from ..scenario import Training, parse_scenario
from ._common import MAX_TOKENS, MFU, PlanError, ScenarioInput, bounded
from .fit import DEFAULT_TARGET, FitResult, max_micro_batch

DEFAULT_MFU = 0.4  # PaLM appendix B reports 46% MFU for PaLM 540B; 0.3-0.5 is typical
_PEAK_KEY: dict[str, HardwareDtype] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8",
             "fp32": "fp32"}  # fp32: PyTorch's default keeps TF32 off for matmuls


@dataclass(frozen=True, slots=True)
class Flops:
    """Training FLOPs per token, by part."""

    matmul: int  # 6N (4N frozen + 6 x adapters with LoRA)
    attention: int  # 6 L H (d_qk + d_v) T
    recompute: int  # checkpointing's extra forward work (executed, not model, FLOPs)

    @property
    def model(self) -> int:
        return self.matmul + self.attention

    @property
    def executed(self) -> int:
        return self.model + self.recompute


def matmul_weights(arch: Architecture) -> tuple[int, int]:
    """(decoder-layer linear weights a token passes through, output head weights h x V)."""
    c = count_params(arch)
    layers = c.dense_layer.linear_weight_count * c.dense_layers
    if c.moe_layer is not None:
        experts = sum(lin.weight_count for lin in c.moe_layer.linears if lin.group == "experts")
        active = experts // c.experts * c.experts_per_token
        layers += (c.moe_layer.linear_weight_count - experts + active) * c.moe_layers
    return layers, arch.hidden_size * arch.head_outputs


def attention_forward_flops(arch: Architecture, seq_len: int) -> int:
    """Forward FLOPs per token of QK^T and AV over all layers: 2 L H (d_qk + d_v) T."""
    L, H, T = arch.num_hidden_layers, arch.num_attention_heads, seq_len
    if arch.is_mla:
        d_qk = (arch.qk_nope_head_dim or 0) + (arch.qk_rope_head_dim or 0)
        d_v = arch.v_head_dim or 0
    else:
        d_qk = d_v = arch.head_size
    return 2 * L * H * (d_qk + d_v) * T


def flops_per_token(arch: Architecture, t: Training, adapter_params: int = 0) -> Flops:
    """Training FLOPs per token (see the module docstring for the formula and sources)."""
    n_layers, n_head = matmul_weights(arch)
    N = n_layers + n_head
    matmul = 6 * N if t.finetuning == "full" else 4 * N + 6 * adapter_params
    attn_fwd = attention_forward_flops(arch, t.seq_len)
    recompute = 0
    if t.activation_checkpointing == "full":
        L = arch.num_hidden_layers
        fraction = min(t.recompute_layers or L, L) / L
        recompute = round(fraction * (2 * n_layers + attn_fwd))
    elif t.activation_checkpointing == "selective":
        recompute = attn_fwd
    return Flops(matmul, 3 * attn_fwd, recompute)


@dataclass(frozen=True, slots=True)
class TrainingCost:
    """Step time, throughput, time and money for `tokens` training tokens."""

    gpus: int
    gpu: str
    tokens: int
    tokens_per_step: int
    flops_per_token: Flops
    peak_tflops_per_gpu: float
    mfu: float
    step_seconds: float
    steps: int
    price_per_gpu_hour: float | None
    price_source: str | None
    fits: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def flops_per_step(self) -> int:
        return self.flops_per_token.executed * self.tokens_per_step

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def train_seconds(self) -> float:
        return self.steps * self.step_seconds

    @property
    def gpu_hours(self) -> float:
        return self.train_seconds / 3600 * self.gpus

    @property
    def cost_usd(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    @property
    def model_flops_utilization(self) -> float:
        """The MFU that results: the assumed utilisation times model over executed FLOPs."""
        f = self.flops_per_token
        return self.mfu * f.model / f.executed

    def as_dict(self) -> dict[str, Any]:
        f = self.flops_per_token
        return {
            "gpus": self.gpus, "gpu": self.gpu, "tokens": self.tokens,
            "tokens_per_step": self.tokens_per_step,
            "flops_per_token": {"matmul": f.matmul, "attention": f.attention,
                                "recompute": f.recompute, "model": f.model,
                                "executed": f.executed},
            "flops_per_step": self.flops_per_step,
            "peak_tflops_per_gpu": self.peak_tflops_per_gpu, "mfu": self.mfu,
            "model_flops_utilization": round(self.model_flops_utilization, 6),
            "step_seconds": self.step_seconds, "tokens_per_second": self.tokens_per_second,
            "steps": self.steps, "train_seconds": self.train_seconds,
            "train_days": self.train_seconds / 86400, "gpu_hours": self.gpu_hours,
            "price_per_gpu_hour": self.price_per_gpu_hour, "price_source": self.price_source,
            "cost_usd": self.cost_usd, "fits": self.fits, "notes": list(self.notes),
        }


def training_cost(
    scenario: ScenarioInput, tokens: int, *, mfu: float = DEFAULT_MFU,
    price_per_gpu_hour: float | None = None,
) -> TrainingCost:
    """Time and cost to train on `tokens` tokens with the scenario's setup.

        >>> c = training_cost({"model": "llama-3-8b", "training": {"seq_len": 8192},
        ...                    "parallelism": {"dp": 8, "zero": 3}}, tokens=10**9)
        >>> c.gpus, c.tokens_per_step
        (8, 65536)
    """
    bounded("tokens", tokens, 1, MAX_TOKENS, integer=True)
    bounded("mfu", mfu, *MFU)
    if price_per_gpu_hour is not None:
        bounded("price_per_gpu_hour", price_per_gpu_hour, 0, 10_000)
    report = estimate(parse_scenario(scenario))
    r = report.resolved
    t, p = r.training, r.parallelism
    key = _PEAK_KEY[t.precision]
    peak = r.gpu.dense_tflops.get(key)
    if peak is None:
        raise PlanError("gpu", f"the {r.gpu.id} preset lists no dense {key} TFLOPS")
    adapters = report.trainable_param_count if t.finetuning != "full" else 0
    flops = flops_per_token(r.arch, t, adapters)
    tokens_per_step = t.micro_batch_size * t.gradient_accumulation_steps * p.dp * t.seq_len
    step_seconds = flops.executed * tokens_per_step / (p.world_size * peak * 1e12 * mfu)
    notes = []
    source = None
    if price_per_gpu_hour is None:
        listed = r.gpu.price  # the GPU preset's list price (presets/gpus/<id>.json)
        if listed is None:
            notes.append(f"no default price for {r.gpu.id}: pass price_per_gpu_hour")
        else:
            price_per_gpu_hour = listed.usd_per_gpu_hour
            checked = "verified" if listed.verified else "unverified"
            source = (f"list price ({checked}, varies): {listed.offer}, {listed.as_of}, "
                      f"{listed.source}")
    else:
        source = "given"
    if not report.fits:
        notes.append("the scenario does not fit in memory: time and cost are hypothetical")
    return TrainingCost(
        gpus=p.world_size, gpu=r.gpu.id, tokens=tokens, tokens_per_step=tokens_per_step,
        flops_per_token=flops, peak_tflops_per_gpu=peak, mfu=mfu, step_seconds=step_seconds,
        steps=math.ceil(tokens / tokens_per_step), price_per_gpu_hour=price_per_gpu_hour,
        price_source=source, fits=report.fits, notes=tuple(notes))


# ---------------------------------------------------------------------------------------------
# The operations: calc cost, and the calculator's "Batch and speed"
# ---------------------------------------------------------------------------------------------

MFU_HELP = "assumed utilisation of the GPU's peak dense TFLOPS"


class CostRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    tokens: Annotated[int, Cli(count=True)] = Field(
        title="Tokens to train", description="training tokens (1e12 is fine)",
        examples=[10**10])
    mfu: float = Field(DEFAULT_MFU, title="MFU", description=MFU_HELP)
    price_per_gpu_hour: float | None = Field(
        None, title="Price per GPU-hour (USD)", description="USD (default: a list price)")


def _cost_text(c: TrainingCost, request: CostRequest) -> str:
    money = "no price" if c.cost_usd is None else f"${c.cost_usd:,.0f}"
    lines = [f"{c.gpus} x {c.gpu}: {c.step_seconds:.3f} s/step, "
             f"{c.tokens_per_second:,.0f} tokens/s at {c.mfu:.0%} of peak",
             f"{c.tokens:,} tokens: {c.steps:,} steps, {c.train_seconds / 86400:,.2f} days, "
             f"{c.gpu_hours:,.0f} GPU-hours, {money}"]
    if c.price_source:
        lines.append(f"  price: {c.price_per_gpu_hour} USD/GPU-hour ({c.price_source})")
    lines += [f"  note: {n}" for n in c.notes]
    return "\n".join(lines)


class BatchAndSpeedRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    target: float = Field(DEFAULT_TARGET, description="fraction of the GPU's usable memory")
    mfu: float = Field(DEFAULT_MFU, description=MFU_HELP)


STEP_TOKENS = 10**9  # training_cost needs a token count; step time and tokens/s do not depend on it


def _batch_and_speed(q: BatchAndSpeedRequest) -> tuple[FitResult, dict[str, Any]]:
    """The largest micro-batch within the target, and the step time of the scenario as set
    (or, where the cost model cannot say, why: {"error": {"field", "message"}})."""
    fit = max_micro_batch(q.scenario, q.target)
    try:
        cost = training_cost(q.scenario, STEP_TOKENS, mfu=q.mfu).as_dict()
    except PlanError as exc:
        cost = {"error": {"field": exc.field, "message": exc.message}}
    return fit, cost


OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("cost", "FLOPs, step time, time and cost to train N tokens", CostRequest,
              run=lambda q: training_cost(q.scenario, q.tokens, mfu=q.mfu,
                                          price_per_gpu_hour=q.price_per_gpu_hour),
              text=_cost_text),
    Operation("batch-and-speed", "the largest micro-batch and the step time of a scenario",
              BatchAndSpeedRequest, run=_batch_and_speed, cli=False,
              data=lambda r, q: {"max_micro_batch": r[0].as_dict(), "cost": r[1]}),
)

__all__ = ["DEFAULT_MFU", "CostRequest", "Flops", "TrainingCost", "attention_forward_flops",
           "flops_per_token", "matmul_weights", "training_cost"]
