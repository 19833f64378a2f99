r"""Memory of preference and RL fine-tuning per GPU: DPO, PPO and GRPO, with the reference,
reward and critic models beside the policy, and (PPO, GRPO) the rollout engine colocated on the
training GPUs or on GPUs of its own.

Each part comes from the module that owns its formula, nothing is re-derived here:

- the policy's training step: `calc.estimate` at `seq_len` = prompt_len + response_len
  (the step trains on the rollouts; DPO: on chosen and rejected responses, so the micro-batch
  is doubled, as TRL concatenates the pair);
- the critic (PPO): its own `calc.estimate`, of `critic_model` (default: the policy's model)
  with the policy's training settings and parallelism, and a hidden_size x 1 value head in
  place of the LM head (the architecture's `num_labels` = 1), as verl
  (``AutoModelForTokenClassification``, ``num_labels = 1``, ``verl/workers/fsdp_workers.py``)
  and OpenRLHF (``value_head``, ``openrlhf/models/model.py``) build it;
- frozen models: bf16 weights, sharded as the policy's parameters
  (\(2N / (t \cdot p)\), and \(/d\) at ZeRO-3); the reference is the policy's model, the
  reward model is `reward_model` (default: the policy's model) as a sequence classifier, its
  LM head replaced by a hidden_size x 1 score head. Their forward runs under no_grad, so its
  activations are freed layer by layer and are not counted;
- the rollout engine: `calc.plan.inference_memory`'s weights and activation workspace
  for one engine of tp = `rollout_tp` (default: the scenario's tp), and
  `calc.plan.kv_cache_bytes` for its sequences at full length. The prompts x
  samples_per_prompt sequences are spread over the engines: by default one per rollout-tp
  group of the trainer's GPUs (world_size / rollout_tp, as verl and
  OpenRLHF colocate them), \(b_{engine} = \lceil prompts \cdot k / engines \rceil\).

Colocated, a step has two phases and the figure per GPU is the larger:

\[
M_{rollout} = E + r\,(S_{\pi} + S_{c} + F), \qquad
M_{train} = \max(T_{\pi} + r S_{c},\ T_{c} + r S_{\pi},\ (1 - r) F_{1}) + r F
  + [\text{no sleep}]\,E
\]

with \(T\) a model's training peak, \(S\) what it keeps between steps (parameters and
optimizer states; gradients are freed after the step), \(F\) the frozen models, \(F_1\) the
larger of them, \(E\) the engine (weights, KV cache, workspace) and \(r\) = 1 when the models
stay resident, 0 when they are offloaded between phases (`offload_between_phases`: verl's
``actor.fsdp_config.param_offload`` and ``optimizer_offload``, the critic's likewise, and its
reference and reward models, which its FSDP workers always wrap with CPU offload;
``verl/workers/fsdp_workers.py``: ``ActorRolloutRefWorker.rollout_mode`` offloads the actor
before the engine resumes, ``update_actor`` loads it back and offloads it after the step,
``_build_model_optimizer`` gives every role but the actor ``CPUOffload(offload_params=True)``).
Offloaded, the frozen models are on the GPU one at a time, for their own forward (counted whole:
an upper bound, FSDP gathers one wrapped layer at a time), and the policy and critic only for
their own update. vLLM's sleep mode (`sleep_mode`, level 1) moves the engine's weights to the
host and discards its KV cache while the trainer runs, so the engine adds nothing to
\(M_{train}\). Not colocated, each model has GPUs of its own, laid out as the scenario (the
figure per GPU is the largest pool). DPO has no rollout: \(M = T_{\pi} + F\).

Host memory per GPU (`host_bytes`): the scenario's own CPU offload, what is offloaded between
phases (\(S_{\pi} + S_{c} + F\)) and, in sleep mode, the engine's weights.

Sources (`calc.sources`): `VERL_FSDP` (volcengine/verl, ``verl/workers/fsdp_workers.py``) and
`OPENRLHF` (OpenRLHF/OpenRLHF, ``openrlhf/utils/deepspeed/deepspeed_utils.py``,
``openrlhf/models/model.py``), read at the commits they name.

Assumed: every sequence is cached at full length at once (an engine may generate fewer at a
time, or preempt); vLLM preallocates `gpu_memory_utilization` of the GPU whatever the need (set
it to the figure here); OpenRLHF's ``--ds.enable_sleep`` (``offload_deepspeed_states`` in
``openrlhf/utils/deepspeed/deepspeed_utils.py``) offloads optimizer states, fp32 weights and
gradients but keeps the bf16 parameter shards on the GPU, so with it the rollout phase is
higher than `offload_between_phases` gives by those shards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from ..architecture import Architecture
from ..errors import FieldError, shown
from ..estimate import Estimate, FitStatus, estimate, fit_status
from ..formatting import FIT_WORDS, params, percent
from ..operations import SCENARIO_HELP, Cli, Operation, Request
from ..params import count_params
from ..scenario import Scenario, parse_scenario, resolve
from ._common import MAX_COUNT, MAX_SEQ, PlanError, ScenarioInput, bounded, changed, gib
from .inference import inference_memory
from .kv_cache import DEFAULT_DTYPE_BYTES, KV_CACHE_DTYPES, check_tp, kv_cache_bytes

Algorithm = Literal["grpo", "ppo", "dpo"]
ALGORITHMS: tuple[Algorithm, ...] = ("grpo", "ppo", "dpo")
Reward = Literal["model", "rule"]
REWARDS: tuple[Reward, ...] = ("model", "rule")
ModelInput = str | dict[str, Any]  # a preset id, {"hf_config": {...}} or an architecture
Component = Literal["training", "critic", "reference", "reward_model", "kv_cache",
                    "inference_weights", "engine_workspace"]
Phase = Literal["rollout", "training"]
Pool = Literal["policy", "critic", "engine"]
INFERENCE_WEIGHT_BYTES = 2  # bf16: what rollout engines and frozen models load
KV_DTYPE_NAMES = {1: "fp8", 2: "bf16", 4: "fp32"}  # cache bytes -> calc inference's kv dtype
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RLMemory:
    """Per-GPU bytes of each model of the step, by phase."""

    algorithm: Algorithm
    training_bytes: int  # the policy's training peak
    critic_bytes: int  # the critic's training peak (PPO), else 0
    policy_resident_bytes: int  # the policy's parameters and optimizer states
    critic_resident_bytes: int
    reference_bytes: int
    reward_model_bytes: int
    kv_cache_bytes: int
    inference_weight_bytes: int
    engine_workspace_bytes: int
    usable_bytes: int
    gpu: str
    colocated: bool
    sleep_mode: bool
    offload_between_phases: bool
    sequences: int  # prompts x samples_per_prompt (DPO: pairs per micro-batch x 2)
    engines: int
    sequences_per_engine: int
    seq_len: int  # prompt_len + response_len
    tp: int  # the rollout engine's tensor parallelism
    param_counts: dict[str, int]  # policy, critic, reward_model (the models on the GPUs)
    scenario_host_bytes: int = 0  # the scenario's own CPU offload, of the policy and critic
    notes: tuple[str, ...] = field(default=())

    @property
    def components(self) -> dict[Component, int]:
        return {"training": self.training_bytes, "critic": self.critic_bytes,
                "reference": self.reference_bytes, "reward_model": self.reward_model_bytes,
                "kv_cache": self.kv_cache_bytes, "inference_weights": self.inference_weight_bytes,
                "engine_workspace": self.engine_workspace_bytes}

    @property
    def rollout_bytes(self) -> int:
        """The engine: weights, KV cache and workspace."""
        return self.kv_cache_bytes + self.inference_weight_bytes + self.engine_workspace_bytes

    @property
    def frozen_bytes(self) -> int:
        return self.reference_bytes + self.reward_model_bytes

    @property
    def phases(self) -> dict[Phase, int]:
        """Per GPU in each phase of a colocated step, \\(M_{rollout}\\) and \\(M_{train}\\)
        (module docstring); DPO: training only."""
        r = 0 if self.offload_between_phases else 1  # 1: the models stay resident
        T_pi, T_c = self.training_bytes, self.critic_bytes
        S_pi, S_c = self.policy_resident_bytes, self.critic_resident_bytes
        F, F_1 = self.frozen_bytes, max(self.reference_bytes, self.reward_model_bytes)
        train = max(T_pi + r * S_c, T_c + r * S_pi, (1 - r) * F_1) + r * F
        if self.algorithm == "dpo":
            return {"training": train}
        E = self.rollout_bytes
        return {"rollout": E + r * (S_pi + S_c + F),
                "training": train + (0 if self.sleep_mode else E)}

    @property
    def pools(self) -> dict[Pool, int]:
        """Not colocated: per GPU of each pool, the policy with its frozen models, the critic
        and the engine, each on GPUs of its own."""
        return {"policy": self.training_bytes + self.frozen_bytes, "critic": self.critic_bytes,
                "engine": self.rollout_bytes}

    @property
    def total_bytes(self) -> int:
        """Per GPU: colocated, the larger phase; else the largest pool of GPUs."""
        if self.colocated or self.algorithm == "dpo":
            return max(self.phases.values())
        return max(self.pools.values())

    @property
    def host_bytes(self) -> int:
        """Host memory per GPU: the scenario's own offload, what goes to the host between
        phases and, in sleep mode, the engine's weights."""
        moved = (self.policy_resident_bytes + self.critic_resident_bytes + self.frozen_bytes
                 if self.offload_between_phases else 0)
        return (self.scenario_host_bytes + moved
                + (self.inference_weight_bytes if self.sleep_mode else 0))

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
        colocated = self.colocated or self.algorithm == "dpo"
        return {"algorithm": self.algorithm, "components": dict(self.components),
                "phases": dict(self.phases) if colocated else {},
                "pools": {} if colocated else dict(self.pools),
                "rollout_bytes": self.rollout_bytes,
                "total_bytes": self.total_bytes, "usable_bytes": self.usable_bytes,
                "utilization": self.utilization, "fits": self.fits, "status": self.status,
                "dominant": self.dominant, "host_bytes": self.host_bytes,
                "param_counts": dict(self.param_counts),
                "gpu": self.gpu, "colocated": self.colocated, "sleep_mode": self.sleep_mode,
                "offload_between_phases": self.offload_between_phases,
                "sequences": self.sequences, "engines": self.engines,
                "sequences_per_engine": self.sequences_per_engine,
                "seq_len": self.seq_len, "tp": self.tp, "notes": list(self.notes)}


def resident_bytes(report: Estimate) -> int:
    """What a trained model keeps between steps: its parameters and optimizer states."""
    c = report.components
    return c.get("parameters", 0) + c.get("optimizer_states", 0)


def frozen_model_bytes(s: Scenario, param_count: int) -> int:
    """A frozen bf16 copy of the model, sharded as the policy's parameters."""
    p = s.parallelism
    shards = p.tp * p.pp * (p.dp if p.zero == 3 else 1)
    return -(-param_count * INFERENCE_WEIGHT_BYTES // shards)


def scorer(arch: Architecture) -> Architecture:
    """`arch` as a reward model or critic (a scenario's model): a hidden_size x 1 head in place
    of the LM head (transformers' ``*ForSequenceClassification`` / ``*ForTokenClassification``
    with num_labels 1, OpenRLHF's ``value_head``: ``nn.Linear(hidden_size, 1, bias=False)``)."""
    return arch.model_copy(update={"num_labels": 1})


def _named(name: str, run: Callable[[], T]) -> T:
    """`run()`, its errors about the scenario named after the request field `name` that set its
    model (`critic_model.hf_config.hidden_size`; `critic_model: parallelism.tp: ...`)."""
    try:
        return run()
    except FieldError as exc:
        if exc.field == "model" or exc.field.startswith("model."):
            raise PlanError(name + exc.field[len("model"):], exc.message) from None
        raise PlanError(name, f"{exc.field}: {exc.message}") from None


def _name(model: Any) -> str:
    return model if isinstance(model, str) else "the given config"


def rl_memory(
    scenario: ScenarioInput, *, algorithm: Algorithm = "grpo", prompts: int | None = None,
    samples_per_prompt: int | None = None, response_len: int, prompt_len: int,
    kv_dtype_bytes: int = DEFAULT_DTYPE_BYTES, colocated: bool = True,
    engines: int | None = None, reference_model: bool = True,
    reward: Reward | None = None, reward_model: ModelInput | None = None,
    critic_model: ModelInput | None = None, sleep_mode: bool = False,
    offload_between_phases: bool = False, rollout_tp: int | None = None,
) -> RLMemory:
    """Per-GPU memory of a DPO, PPO or GRPO step.

    `reference_model` False: no reference model on the GPUs (GRPO/PPO without a KL term, DPO
    with the reference log-probs precomputed); `reward`: a reward model or a rule (default:
    a model for PPO, or wherever `reward_model` is given, else a rule); `reward_model`,
    `critic_model`: those models (a preset id or a scenario's model object; default: the
    policy's); `sleep_mode`: the engine frees its weights and KV cache while the trainer runs
    (vLLM's sleep mode); `offload_between_phases`: the trainer's models go to host memory while
    the engine generates, and the frozen models while they are not used (verl's param and
    optimizer offload); `rollout_tp`: the engine's tensor parallelism (default: the
    scenario's tp; verl's ``rollout.tensor_model_parallel_size`` is its own, often above an
    FSDP trainer's 1); `engines`: rollout engines sharing the prompts x samples sequences
    (default: world_size / rollout_tp when colocated, else 1).

        >>> m = rl_memory({"model": "qwen2.5-7b", "parallelism": {"tp": 4}}, prompts=32,
        ...               samples_per_prompt=8, prompt_len=1024, response_len=7168)
        >>> m.kv_cache_bytes == 28 * 2 * 1 * 128 * 8192 * 256 * 2  # 28 GiB per GPU
        True
        >>> m.inference_weight_bytes == m.reference_bytes == 7_615_616_512 * 2 // 4
        True
    """
    if algorithm not in ALGORITHMS:
        raise PlanError("algorithm", f"must be one of {', '.join(ALGORITHMS)}, got "
                        f"{shown(algorithm)}")
    if reward is not None and reward not in REWARDS:
        raise PlanError("reward", f"must be one of {', '.join(REWARDS)}, got {shown(reward)}")
    rollout = algorithm != "dpo"
    if rollout:
        for name, value in (("prompts", prompts), ("samples_per_prompt", samples_per_prompt)):
            if value is None:
                raise PlanError(name, f"is required for {algorithm} (the rollout batch)")
            bounded(name, value, 1, MAX_COUNT, integer=True)
    else:
        for name, value in (("prompts", prompts), ("samples_per_prompt", samples_per_prompt),
                            ("engines", engines)):
            if value is not None:
                raise PlanError(name, "dpo has no rollout; leave it out")
        for name, on in (("sleep_mode", sleep_mode), ("colocated", not colocated),
                         ("offload_between_phases", offload_between_phases)):
            if on:
                raise PlanError(name, "dpo has no rollout engine; leave it out")
    if offload_between_phases and not colocated:
        raise PlanError("offload_between_phases", "offloads the trainer's models while the "
                        "engine generates on the same GPUs: it needs colocated")
    if critic_model is not None and algorithm != "ppo":
        raise PlanError("critic_model", f"{algorithm} trains no critic (only ppo does); leave "
                        "it out")
    if reward_model is not None and reward == "rule":
        raise PlanError("reward_model", "a rule-based reward has no model; leave it out, or "
                        "set reward to model")
    bounded("response_len", response_len, 1, MAX_SEQ, integer=True)
    bounded("prompt_len", prompt_len, 0, MAX_SEQ, integer=True)
    if kv_dtype_bytes not in KV_CACHE_DTYPES:
        raise PlanError("kv_dtype_bytes", f"must be one of {', '.join(map(str, KV_CACHE_DTYPES))}"
                        f" ({', '.join(KV_CACHE_DTYPES.values())}), got {shown(kv_dtype_bytes)}")
    if reward is None:
        reward = "model" if algorithm == "ppo" or reward_model is not None else "rule"
    base = parse_scenario(scenario)
    p = base.parallelism
    seq = prompt_len + response_len
    notes: list[str] = []
    if base.training.seq_len != seq:
        notes.append(f"training seq_len set to prompt_len + response_len = {seq} (the scenario "
                     f"had {base.training.seq_len}): the step trains on the "
                     + ("rollouts" if rollout else "preference pairs"))
    micro = base.training.micro_batch_size * (1 if rollout else 2)
    if not rollout:
        notes.append(f"dpo: chosen and rejected responses in one batch, micro-batch "
                     f"{base.training.micro_batch_size} pairs = {micro} sequences")
    trained = changed(base, training={"seq_len": seq, "micro_batch_size": micro})
    report = estimate(trained)
    n = report.param_count
    critic: Estimate | None = None
    if algorithm == "ppo":
        named = critic_model if critic_model is not None else base.model
        critic = _named("critic_model", lambda: estimate(changed(trained, model=scorer(
            resolve(changed(trained, model=named)).arch).model_dump(mode="json"))))
        notes.append(f"critic ({_name(named)}, {params(critic.param_count)} parameters): the "
                     "policy's training settings and parallelism, a hidden_size x 1 value head "
                     "in place of the LM head (verl's AutoModelForTokenClassification with "
                     "num_labels 1, OpenRLHF's value_head)")
    reward_n = 0
    if reward == "model":
        arch = report.resolved.arch if reward_model is None else _named(
            "reward_model", lambda: resolve(changed(base, model=reward_model)).arch)
        reward_n = count_params(scorer(arch)).total
        if reward_model is not None:
            notes.append(f"reward model: frozen, bf16, {params(reward_n)} parameters (its LM "
                         "head replaced by a hidden_size x 1 score head)")
    engines_n = per_engine = sequences = kv = weights = workspace = 0
    engine_tp = p.tp if rollout_tp is None else rollout_tp
    if rollout_tp is not None:
        if not rollout:
            raise PlanError("rollout_tp", "dpo has no rollout engine; leave it out")
        check_tp(report.resolved.arch, rollout_tp, "rollout_tp")
        if colocated and p.world_size % rollout_tp:
            raise PlanError("rollout_tp", f"({rollout_tp}) must divide the {p.world_size} "
                            "training GPUs the colocated engines share")
    if rollout:
        assert prompts is not None and samples_per_prompt is not None
        if engines is None:
            engines_n = p.world_size // engine_tp if colocated else 1
        else:
            bounded("engines", engines, 1, MAX_COUNT, integer=True)
            engines_n = engines
        sequences = prompts * samples_per_prompt
        per_engine = -(-sequences // engines_n)
        kv = kv_cache_bytes(report.resolved.arch, per_engine, seq, kv_dtype_bytes, tp=engine_tp)
        model = base.model if isinstance(base.model, str) \
            else base.model.model_dump(mode="json")
        engine = inference_memory(model, gpu=report.resolved.gpu.id, tp=engine_tp,
                                  max_model_len=seq, max_num_seqs=min(per_engine, MAX_COUNT),
                                  kv_cache_dtype=KV_DTYPE_NAMES[kv_dtype_bytes]
                                  if kv_dtype_bytes != 4 else "auto")
        weights, workspace = engine.weight_bytes, engine.activation_bytes
        if base.training.finetuning != "full":
            notes.append(f"{base.training.finetuning}: the engine is counted with bf16 weights "
                         "(adapters merged or served beside them)")
        if sleep_mode:
            notes.append("sleep mode: the engine's weights go to host memory and its KV cache "
                         "is freed while the trainer runs; its CUDA graphs stay (not counted)")
    m = RLMemory(
        algorithm=algorithm, training_bytes=report.device_bytes,
        critic_bytes=critic.device_bytes if critic else 0,
        policy_resident_bytes=resident_bytes(report),
        critic_resident_bytes=resident_bytes(critic) if critic else 0,
        reference_bytes=frozen_model_bytes(base, n) if reference_model else 0,
        reward_model_bytes=frozen_model_bytes(base, reward_n) if reward_n else 0,
        kv_cache_bytes=kv, inference_weight_bytes=weights, engine_workspace_bytes=workspace,
        usable_bytes=report.usable_bytes, gpu=report.resolved.gpu.id, colocated=colocated,
        sleep_mode=sleep_mode, offload_between_phases=offload_between_phases,
        sequences=sequences, engines=engines_n, sequences_per_engine=per_engine, seq_len=seq,
        tp=engine_tp, param_counts={"policy": n, "critic": critic.param_count if critic else 0,
                               "reward_model": reward_n},
        scenario_host_bytes=report.host_bytes + (critic.host_bytes if critic else 0))
    if offload_between_phases:
        trainers = "policy's and critic's" if critic else "policy's"
        notes.append(f"offload between phases (verl's param_offload and optimizer_offload): the "
                     f"{trainers} parameters and optimizer states "
                     f"({gib(m.policy_resident_bytes + m.critic_resident_bytes)}) and the frozen "
                     f"models ({gib(m.frozen_bytes)}) wait in host memory while the engine "
                     "generates; each frozen model is on the GPU for its own forward (counted "
                     "whole: an upper bound, FSDP gathers one layer at a time)")
    if not colocated and rollout:
        notes.append("not colocated: the engine, the critic and the policy with its frozen "
                     "models each on GPUs of their own; the figure per GPU is the largest")
    return replace(m, notes=tuple(notes))


# ---------------------------------------------------------------------------------------------
# The operation: calc rl
# ---------------------------------------------------------------------------------------------

class RLRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    algorithm: Algorithm = Field("grpo", title="Algorithm", description=(
        "grpo (policy, reference, rollout engine), ppo (and a critic and a reward model) or dpo "
        "(policy and reference, no rollout)"))
    prompts: int | None = Field(None, title="Prompts per rollout batch", description=(
        "prompts per rollout batch (grpo, ppo)"), examples=[32])
    samples_per_prompt: int | None = Field(None, title="Samples per prompt", description=(
        "responses generated for each prompt (grpo, ppo)"), examples=[8])
    response_len: int = Field(title="Response length (tokens)",
                              description="tokens per response", examples=[7168])
    prompt_len: int = Field(512, title="Prompt length (tokens)", description="tokens per prompt")
    kv_dtype_bytes: int = Field(DEFAULT_DTYPE_BYTES, title="KV cache dtype",
                                description="bytes per cached element (bf16: 2, fp8 cache: 1)")
    colocated: Annotated[bool, Cli(flag="--separate", negate=True, help=(
        "the rollout engine (and the critic) run on GPUs of their own (not colocated)"))] = Field(
        True, title="Engine on the training GPUs (colocated)",
        description="the rollout engine runs on the training GPUs")
    engines: int | None = Field(None, title="Rollout engines", description="rollout engines "
                                "(default: GPUs / rollout tp when colocated, else 1)")
    rollout_tp: int | None = Field(None, title="Rollout tensor parallelism", description=(
        "the engine's tp (default: the scenario's; verl's rollout.tensor_model_parallel_size)"))
    reference_model: Annotated[bool, Cli(flag="--no-reference-model", negate=True, help=(
        "no reference model on the GPUs: no KL term (grpo, ppo), or the reference log-probs "
        "precomputed (dpo)"))] = Field(
        True, title="Reference model on the GPUs",
        description="a frozen reference model beside the policy")
    reward: Reward | None = Field(None, title="Reward", description=(
        "a reward model, or a rule (default: model for ppo or with reward_model, else rule)"))
    reward_model: ModelInput | None = Field(None, title="Reward model", description=(
        "the reward model, frozen: a model preset id (in JSON also {\"hf_config\": {...}}); "
        "default: the policy's model"))
    critic_model: ModelInput | None = Field(None, title="Critic model (ppo)", description=(
        "the critic, trained with the policy's settings: a model preset id (in JSON also "
        "{\"hf_config\": {...}}); default: the policy's model"))
    sleep_mode: bool = Field(False, title="Engine sleeps while training", description=(
        "the engine frees its weights and KV cache while the trainer runs (vLLM sleep mode)"))
    offload_between_phases: bool = Field(False, title="Offload models between phases", description=(
        "the policy's and critic's parameters and optimizer states go to host memory while the "
        "engine generates, the frozen models while they are not used (verl's param_offload "
        "and optimizer_offload)"))


def _run(q: RLRequest) -> RLMemory:
    return rl_memory(q.scenario, algorithm=q.algorithm, prompts=q.prompts,
                     samples_per_prompt=q.samples_per_prompt, response_len=q.response_len,
                     prompt_len=q.prompt_len, kv_dtype_bytes=q.kv_dtype_bytes,
                     colocated=q.colocated, engines=q.engines,
                     reference_model=q.reference_model, reward=q.reward,
                     reward_model=q.reward_model, critic_model=q.critic_model,
                     sleep_mode=q.sleep_mode, offload_between_phases=q.offload_between_phases,
                     rollout_tp=q.rollout_tp)


def _text(m: RLMemory, request: RLRequest) -> str:
    if m.algorithm == "dpo":
        lines = [f"dpo on sequences of {m.seq_len} tokens, on {m.gpu}:"]
    else:
        lines = [f"{m.algorithm}: {m.sequences} sequences of {m.seq_len} tokens, {m.engines} "
                 f"engine(s) of tp {m.tp}, {m.sequences_per_engine} sequences each, on {m.gpu}:"]
    lines += [f"  {name:<18}{gib(value):>14}" + ("  <- dominates" if name == m.dominant else "")
              for name, value in m.components.items() if value]
    if m.colocated or m.algorithm == "dpo":
        lines += [f"  {phase + ' phase':<18}{gib(value):>14}" for phase, value in m.phases.items()]
    else:
        lines += [f"  {pool + ' GPUs':<18}{gib(value):>14}" for pool, value in m.pools.items()
                  if value]
    lines.append(f"  {'per GPU':<18}{gib(m.total_bytes):>14}  of {gib(m.usable_bytes)} "
                 f"({percent(m.utilization)}, {FIT_WORDS[m.status]})")
    if m.host_bytes:
        lines.append(f"  {'host memory':<18}{gib(m.host_bytes):>14}  per GPU")
    lines += [f"  note: {n}" for n in m.notes]
    return "\n".join(lines)


def _page(m: RLMemory, request: RLRequest) -> dict[str, Any]:
    """The answer with `scenario_device_bytes`: the scenario's own estimate, as set (at its own
    seq_len), to compare with."""
    return {**m.as_dict(), "scenario_device_bytes": estimate(request.scenario).device_bytes}


OPERATIONS: tuple[Operation[RLRequest, RLMemory], ...] = (
    Operation("rl", "DPO / PPO / GRPO fine-tuning: policy, reference, critic, reward model and "
              "rollout engine per GPU",
              RLRequest, run=_run, text=_text, browser=_page),
)

__all__ = ["ALGORITHMS", "REWARDS", "Algorithm", "ModelInput", "RLMemory", "RLRequest", "Reward",
           "rl_memory", "scorer"]
