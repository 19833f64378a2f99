r"""Memory of RL fine-tuning (PPO, GRPO, ...) with the rollout engine on the training GPUs:
the training step, the rollout's KV cache and the engine's copy of the weights, per GPU.

.. math::

    M_{GPU} = M_{train} + M_{KV}(b_{engine}, s) + \lceil 2 N / t \rceil

- :math:`M_{train}`: the training estimate's `device_bytes`, with `seq_len` = prompt_len +
  response_len (the step trains on the rollouts);
- :math:`M_{KV}`: :func:`calc.plan.kv_cache_bytes` for the sequences of one engine at full
  length :math:`s` = prompt_len + response_len, heads split over the engine's tensor
  parallelism :math:`t` (= the scenario's tp). The prompts x samples_per_prompt sequences of
  a rollout are spread over the engines: by default one engine per tp group of the trainer's
  GPUs (world_size / tp, as verl and OpenRLHF colocate them), so
  :math:`b_{engine} = \lceil prompts \cdot k / engines \rceil`;
- :math:`2N/t`: the engine's own bf16 copy of the :math:`N` weights, sharded over tp
  (vLLM / SGLang hold one beside the trainer's).

Not colocated (`colocated=False`), the engine runs on GPUs of its own: those hold the weights
and the cache, the trainer's GPUs the training step, and the figure per GPU is the larger.
Assumed: nothing is offloaded between phases (verl can offload the trainer's states while
generating, vLLM's sleep mode frees the engine's while training: then the peak is the larger
phase, not the sum); every sequence is cached at full length at once (an engine may generate
fewer at a time, or preempt); no reference model or critic (GRPO's KL term and PPO's value
model are extra models, estimate them apart); vLLM preallocates `gpu_memory_utilization` of
the GPU whatever the need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from ..errors import shown
from ..estimate import FIT_WORDS, FitStatus, estimate, fit_status
from ..operations import SCENARIO_HELP, Cli, Operation, Request
from ..scenario import parse_scenario
from ._common import MAX_COUNT, MAX_SEQ, PlanError, ScenarioInput, bounded, changed, gib
from .kv_cache import DEFAULT_DTYPE_BYTES, KV_CACHE_DTYPES, kv_cache_bytes

Component = Literal["training", "kv_cache", "inference_weights"]
INFERENCE_WEIGHT_BYTES = 2  # bf16: what rollout engines load


@dataclass(frozen=True, slots=True)
class RLMemory:
    """Per-GPU bytes of the training step, the rollout KV cache and the engine's weights."""

    training_bytes: int
    kv_cache_bytes: int
    inference_weight_bytes: int
    usable_bytes: int
    gpu: str
    colocated: bool
    sequences: int  # prompts x samples_per_prompt
    engines: int
    sequences_per_engine: int
    seq_len: int  # prompt_len + response_len
    tp: int
    notes: tuple[str, ...] = field(default=())

    @property
    def components(self) -> dict[Component, int]:
        return {"training": self.training_bytes, "kv_cache": self.kv_cache_bytes,
                "inference_weights": self.inference_weight_bytes}

    @property
    def rollout_bytes(self) -> int:
        return self.kv_cache_bytes + self.inference_weight_bytes

    @property
    def total_bytes(self) -> int:
        """Per GPU: the sum when colocated, else the larger of trainer and engine GPUs."""
        if self.colocated:
            return self.training_bytes + self.rollout_bytes
        return max(self.training_bytes, self.rollout_bytes)

    @property
    def dominant(self) -> Component:
        return max(self.components.items(), key=lambda kv: kv[1])[0]

    @property
    def utilization(self) -> float:
        return self.total_bytes / self.usable_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes

    @property
    def status(self) -> FitStatus:
        return fit_status(self.total_bytes, self.usable_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"components": dict(self.components), "rollout_bytes": self.rollout_bytes,
                "total_bytes": self.total_bytes, "usable_bytes": self.usable_bytes,
                "utilization": self.utilization, "fits": self.fits, "status": self.status,
                "dominant": self.dominant,
                "gpu": self.gpu, "colocated": self.colocated, "sequences": self.sequences,
                "engines": self.engines, "sequences_per_engine": self.sequences_per_engine,
                "seq_len": self.seq_len, "tp": self.tp, "notes": list(self.notes)}


def rl_memory(
    scenario: ScenarioInput, *, prompts: int, samples_per_prompt: int, response_len: int,
    prompt_len: int, kv_dtype_bytes: int = DEFAULT_DTYPE_BYTES, colocated: bool = True,
    engines: int | None = None,
) -> RLMemory:
    """Per-GPU memory of an RL step: training, rollout KV cache, the engine's weights.

    `engines`: rollout engines sharing the prompts x samples sequences (default: world_size /
    tp when colocated, else 1).

        >>> m = rl_memory({"model": "qwen2.5-7b", "parallelism": {"tp": 4}}, prompts=32,
        ...               samples_per_prompt=8, prompt_len=1024, response_len=7168)
        >>> m.kv_cache_bytes == 28 * 2 * 1 * 128 * 8192 * 256 * 2  # 28 GiB per GPU
        True
        >>> m.inference_weight_bytes == 7_615_616_512 * 2 // 4
        True
    """
    for name, value in (("prompts", prompts), ("samples_per_prompt", samples_per_prompt)):
        bounded(name, value, 1, MAX_COUNT, integer=True)
    bounded("response_len", response_len, 1, MAX_SEQ, integer=True)
    bounded("prompt_len", prompt_len, 0, MAX_SEQ, integer=True)
    if kv_dtype_bytes not in KV_CACHE_DTYPES:
        raise PlanError("kv_dtype_bytes", f"must be one of {', '.join(map(str, KV_CACHE_DTYPES))}"
                        f" ({', '.join(KV_CACHE_DTYPES.values())}), got {shown(kv_dtype_bytes)}")
    base = parse_scenario(scenario)
    p = base.parallelism
    seq = prompt_len + response_len
    notes: list[str] = []
    if base.training.seq_len != seq:
        notes.append(f"training seq_len set to prompt_len + response_len = {seq} (the scenario "
                     f"had {base.training.seq_len}): the step trains on the rollouts")
    report = estimate(changed(base, training={"seq_len": seq}))
    if engines is None:
        engines = p.world_size // p.tp if colocated else 1
    else:
        bounded("engines", engines, 1, MAX_COUNT, integer=True)
    sequences = prompts * samples_per_prompt
    per_engine = -(-sequences // engines)
    kv = kv_cache_bytes(report.resolved.arch, per_engine, seq, kv_dtype_bytes, tp=p.tp)
    weights = -(-report.param_count * INFERENCE_WEIGHT_BYTES // p.tp)
    if base.training.finetuning != "full":
        notes.append(f"{base.training.finetuning}: the engine is counted with bf16 weights "
                     "(adapters merged or served beside them)")
    if not colocated:
        notes.append("not colocated: the engine's GPUs hold the weights and the cache, the "
                     "trainer's the training step; the figure per GPU is the larger")
    return RLMemory(
        training_bytes=report.device_bytes, kv_cache_bytes=kv, inference_weight_bytes=weights,
        usable_bytes=report.usable_bytes, gpu=report.resolved.gpu.id, colocated=colocated,
        sequences=sequences, engines=engines, sequences_per_engine=per_engine, seq_len=seq,
        tp=p.tp, notes=tuple(notes))


# ---------------------------------------------------------------------------------------------
# The operation: calc rl
# ---------------------------------------------------------------------------------------------

class RLRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    prompts: int = Field(title="Prompts per rollout batch", description="prompts per rollout "
                         "batch", examples=[32])
    samples_per_prompt: int = Field(title="Samples per prompt", description="responses "
                                    "generated for each prompt", examples=[8])
    response_len: int = Field(title="Rollout length (tokens per response)",
                              description="tokens per response", examples=[7168])
    prompt_len: int = Field(512, title="Prompt length (tokens)", description="tokens per prompt")
    kv_dtype_bytes: int = Field(DEFAULT_DTYPE_BYTES, title="KV cache dtype",
                                description="bytes per cached element (bf16: 2, fp8 cache: 1)")
    colocated: Annotated[bool, Cli(flag="--separate", negate=True, help=(
        "the rollout engine runs on GPUs of its own (not colocated)"))] = Field(
        True, title="Engine on the training GPUs (colocated)",
        description="the rollout engine runs on the training GPUs")
    engines: int | None = Field(None, title="Rollout engines", description="rollout engines "
                                "(default: GPUs / tp when colocated, else 1)")


def _run(q: RLRequest) -> RLMemory:
    return rl_memory(q.scenario, prompts=q.prompts, samples_per_prompt=q.samples_per_prompt,
                     response_len=q.response_len, prompt_len=q.prompt_len,
                     kv_dtype_bytes=q.kv_dtype_bytes, colocated=q.colocated, engines=q.engines)


def _text(m: RLMemory, request: RLRequest) -> str:
    lines = [f"{m.sequences} sequences of {m.seq_len} tokens, {m.engines} engine(s) of tp "
             f"{m.tp}, {m.sequences_per_engine} sequences each, on {m.gpu}:"]
    lines += [f"  {name:<18}{gib(value):>14}" + ("  <- dominates" if name == m.dominant else "")
              for name, value in m.components.items()]
    lines.append(f"  {'per GPU':<18}{gib(m.total_bytes):>14}  of {gib(m.usable_bytes)} "
                 f"({m.utilization:.0%}, {FIT_WORDS[m.status]})")
    lines += [f"  note: {n}" for n in m.notes]
    return "\n".join(lines)


def _page(m: RLMemory, request: RLRequest) -> dict[str, Any]:
    """The answer with `scenario_device_bytes`: the scenario's own estimate, as set (at its own
    seq_len), to compare with."""
    return {**m.as_dict(), "scenario_device_bytes": estimate(request.scenario).device_bytes}


OPERATIONS: tuple[Operation[RLRequest, RLMemory], ...] = (
    Operation("rl", "RL fine-tuning: training + rollout KV cache + engine weights per GPU",
              RLRequest, run=_run, text=_text, browser=_page),
)

__all__ = ["RLMemory", "RLRequest", "rl_memory"]
