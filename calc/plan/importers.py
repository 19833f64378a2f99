"""Framework configuration import: a DeepSpeed, Accelerate or Hugging Face Trainer config as
a scenario, the natural start when debugging someone else's OOM. The reverse of :mod:`export`.

The configs name no model and (mostly) no sequence length: the model is an argument, the
sequence length stays the scenario default unless the config has one (TRL's `max_length`),
and every setting the importer does not turn into a scenario field comes back in `notes`:
settings that do not change memory are listed together, the rest one note each. Nothing is
dropped silently. Settings that contradict each other (bf16 and fp16 both on, a DeepSpeed
`train_batch_size` that is not micro-batch x accumulation x dp) raise
:class:`ConfigImportError` naming the setting.

Formats:
- `deepspeed`: the JSON config (https://www.deepspeed.ai/docs/config-json/). `"auto"` values
  (filled in by the HF Trainer) are read as unknown, with a note.
- `accelerate-fsdp`: the YAML `accelerate config` writes (FSDP1 or FSDP2; also
  `distributed_type` MULTI_GPU, NO and DEEPSPEED with an inline `deepspeed_config`). Only the
  YAML subset Accelerate writes is read (see :func:`parse_yaml`); JSON is accepted too.
- `hf-trainer`: `TrainingArguments` keyword arguments as a JSON object; a nested `deepspeed`
  dict is imported with the DeepSpeed rules, its `"auto"` values filled from the arguments as
  the Trainer does, and a conflicting value is an error as in the Trainer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, NamedTuple, get_args

from ..scenario import Scenario, Training, parse_scenario, resolve
from ._common import PlanError

ImportFormat = Literal["deepspeed", "accelerate-fsdp", "hf-trainer"]
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)


class ConfigImportError(PlanError):
    """A config that cannot be read as a scenario: `field` names the setting (a dotted path
    inside the config), `message` the rule."""


class Imported(NamedTuple):
    """The scenario a config describes and what the import could not express."""

    scenario: Scenario
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.model_dump(mode="json"), "notes": list(self.notes)}


# ---------------------------------------------------------------------------------------------
# A YAML subset: what Accelerate's config files use
# ---------------------------------------------------------------------------------------------

_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")
_YAML_BOOL = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


def _yaml_scalar(text: str, line: int) -> Any:
    text = text.strip()
    if text[:1] in ("'", '"'):
        quote = text[0]
        if len(text) < 2 or text[-1] != quote:
            raise ConfigImportError("yaml", f"line {line}: unterminated string {text!r}")
        body = text[1:-1]
        return body.replace("''", "'") if quote == "'" else json.loads(text)
    if text.startswith(("[", "{")):
        if not text.endswith("]" if text[0] == "[" else "}"):
            raise ConfigImportError("yaml", f"line {line}: flow collections must close on the "
                                    "same line")
        items = [i for i in (s.strip() for s in text[1:-1].split(",")) if i]
        if text[0] == "[":
            return [_yaml_scalar(i, line) for i in items]
        out: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition(":")
            if not sep:
                raise ConfigImportError("yaml", f"line {line}: expected key: value in {item!r}")
            out[key.strip()] = _yaml_scalar(value, line)
        return out
    low = text.lower()
    if low in _YAML_BOOL:  # YAML 1.1, as PyYAML (Accelerate's reader) reads it
        return _YAML_BOOL[low]
    if low in ("null", "~", ""):
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def parse_yaml(text: str) -> dict[str, Any]:
    """The block-style YAML subset Accelerate writes: nested mappings by indentation,
    `- item` lists of scalars, one-line flow `[a, b]` / `{k: v}` of scalars, quoted and plain
    scalars (YAML 1.1 booleans: `yes`/`no` too), `#` comments, `---`. Anchors, multi-line
    strings and nested flow collections are refused with the line number.

        >>> parse_yaml("a: 1\\nb:\\n  c: 'no'\\n  d: [x, 2]\\ne:\\n- f\\n")
        {'a': 1, 'b': {'c': 'no', 'd': ['x', 2]}, 'e': ['f']}
    """
    root: dict[str, Any] = {}
    # stack of (indent of the keys in this mapping, the mapping)
    stack: list[tuple[int, dict[str, Any]]] = [(0, root)]
    pending: tuple[int, dict[str, Any], str] | None = None  # a `key:` awaiting its block
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ConfigImportError("yaml", f"line {number}: tabs are not YAML indentation")
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if body.startswith(("&", "*", "|", ">", "!")) or re.search(r":\s+[&*|>!]", body):
            raise ConfigImportError("yaml", f"line {number}: anchors, tags and block strings "
                                    "are not read")
        if body.startswith("- ") or body == "-":
            if pending is None or indent < pending[0]:
                raise ConfigImportError("yaml", f"line {number}: a list item needs a key above")
            _, parent, key = pending
            if not isinstance(parent.get(key), list):
                parent[key] = []
            parent[key].append(_yaml_scalar(body[1:], number))
            continue
        if pending is not None:
            p_indent, parent, key = pending
            if isinstance(parent.get(key), list):
                pending = None
            elif indent > p_indent:
                child: dict[str, Any] = {}
                parent[key] = child
                stack.append((indent, child))
            pending = None
        while stack and indent < stack[-1][0]:
            stack.pop()
        if not stack or indent != stack[-1][0]:
            raise ConfigImportError("yaml", f"line {number}: unexpected indentation")
        mapping = stack[-1][1]
        match = re.match(r"^([^:]+?)\s*:(\s+(.*))?$", body)
        if match is None:
            raise ConfigImportError("yaml", f"line {number}: expected `key: value`")
        key, value = match.group(1).strip("'\""), match.group(3)
        if key in mapping:
            raise ConfigImportError("yaml", f"line {number}: duplicate key {key!r}")
        if value is None or value == "":
            mapping[key] = None
            pending = (indent, mapping, key)
        else:
            mapping[key] = _yaml_scalar(value, number)
    return root


def _load(source: str | bytes | dict[str, Any], yaml: bool) -> dict[str, Any]:
    if isinstance(source, dict):
        return source
    text = source.decode() if isinstance(source, bytes) else source
    if not yaml or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigImportError("config", f"is not valid JSON ({exc.msg} at line "
                                    f"{exc.lineno})") from None
    else:
        data = parse_yaml(text)
    if not isinstance(data, dict):
        raise ConfigImportError("config", "must be a mapping (a JSON object)")
    return data


# ---------------------------------------------------------------------------------------------
# Reading a config, with every key accounted for
# ---------------------------------------------------------------------------------------------

class _Reader:
    """A config mapping whose keys are marked as read; what is left becomes notes."""

    def __init__(self, data: dict[str, Any], prefix: str, inert: frozenset[str]) -> None:
        self.data, self.prefix, self.inert = data, prefix, inert
        self.read: set[str] = set()
        self.children: list[_Reader] = []

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self.data.get(key, default)

    def sub(self, key: str) -> _Reader | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ConfigImportError(self.path(key), f"must be a mapping, got {value!r}")
        child = _Reader(value, f"{self.path(key)}.", self.inert)
        self.children.append(child)
        return child

    def leftovers(self) -> tuple[list[str], list[str]]:
        """(settings not affecting memory, others), as `path = value`."""
        inert: list[str] = []
        other: list[str] = []
        for key, value in self.data.items():
            if key in self.read:
                continue
            path = self.path(key)
            (inert if key in self.inert or path in self.inert else other).append(
                f"{path} = {json.dumps(value)}")
        for child in self.children:
            i, o = child.leftovers()
            inert += i
            other += o
        return inert, other


def _finish(readers: list[_Reader], notes: list[str]) -> None:
    inert: list[str] = []
    for reader in readers:
        i, other = reader.leftovers()
        inert += [s.split(" = ")[0] for s in i]
        notes += [f"{s}: not modelled by the estimate, not read" for s in other]
    if inert:
        notes.append("not memory settings, not read: " + ", ".join(inert))


def _flag(reader: _Reader, key: str, default: bool = False) -> bool:
    value = reader.get(key, default)
    if isinstance(value, str) and value.lower() in _YAML_BOOL:
        value = _YAML_BOOL[value.lower()]
    if not isinstance(value, bool):
        raise ConfigImportError(reader.path(key), f"must be true or false, got {value!r}")
    return value


def _positive(reader: _Reader, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigImportError(reader.path(key), f"must be a positive integer, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------

_DS_INERT = frozenset({
    "steps_per_print", "wall_clock_breakdown", "gradient_clipping", "scheduler", "lr", "betas",
    "eps", "weight_decay", "prescale_gradients", "gradient_predivide_factor", "dump_state",
    "tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler", "comms_logger",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "loss_scale",
    "loss_scale_window", "initial_scale_power", "hysteresis", "min_loss_scale",
    "consecutive_hysteresis", "bias_correction", "amsgrad", "memory_breakdown",
    "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
    "synchronize_checkpoint_boundary", "profile", "checkpoint", "seed",
    "pin_memory",  # pinned host buffers for offload: host memory, not device
})

# Optimizers DeepSpeed builds by name that keep what a scenario optimizer keeps.
_DS_LIKE = {"lamb": "adamw", "onebitadam": "adamw", "zerooneadam": "adamw",
            "onebitlamb": "adamw", "fusedlamb": "adamw", "adagrad": "sgd_momentum",
            "cpuadam": "adamw", "deepspeedcpuadam": "adamw", "fusedadam": "adamw"}

_AUTO = "auto"


class _DeepSpeedResult(NamedTuple):
    training: dict[str, Any]
    parallelism: dict[str, Any]
    batch: tuple[Any, Any, Any]  # micro, accumulation, train_batch_size as written
    precision: tuple[Any, Any]  # bf16.enabled, fp16.enabled as written


def _deepspeed_settings(ds: _Reader, notes: list[str]) -> _DeepSpeedResult:
    """The DeepSpeed sections (batch sizes are returned raw: their meaning needs dp)."""
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {}
    batch = (ds.get("train_micro_batch_size_per_gpu"), ds.get("gradient_accumulation_steps"),
             ds.get("train_batch_size"))
    enabled: list[Any] = []
    for name in ("bf16", "fp16"):
        section = ds.sub(name)
        on = section.get("enabled", False) if section is not None else False
        if name == "bf16" and section is None and (legacy := ds.sub("bfloat16")) is not None:
            on = legacy.get("enabled", False)  # the old spelling
        enabled.append(on)
    for name in ("amp", "torch_autocast"):
        section = ds.sub(name)
        if section is not None and section.get("enabled", False):
            notes.append(f"{name}.enabled: DeepSpeed's {name} keeps fp32 weights and computes "
                         "under autocast; imported as mixed_precision amp")
            training["mixed_precision"] = "amp"
            section.get("dtype")
    zero = ds.sub("zero_optimization")
    stage = 0
    if zero is not None:
        stage = zero.get("stage", 0)
        if stage not in (0, 1, 2, 3):
            raise ConfigImportError("zero_optimization.stage", f"must be 0-3, got {stage!r}")
        for key, field in (("offload_optimizer", "offload_optimizer"),
                           ("offload_param", "offload_params")):
            section = zero.sub(key)
            device = section.get("device", "none") if section is not None else "none"
            if device in ("cpu", "nvme"):
                parallelism[field] = True
                if device == "nvme":
                    notes.append(f"zero_optimization.{key}.device nvme: read as host (CPU) "
                                 "offload; device memory is the same")
                if section is not None and section.get("ratio", 1) != 1:
                    notes.append(f"zero_optimization.{key}.ratio: partial offload is not "
                                 "modelled; estimated as offloading everything")
            elif device not in ("none", None):
                raise ConfigImportError(f"zero_optimization.{key}.device",
                                        f"must be cpu, nvme or none, got {device!r}")
        for key in ("cpu_offload", "cpu_offload_params"):  # pre-0.3 spellings
            if zero.get(key):
                parallelism["offload_optimizer" if key == "cpu_offload" else "offload_params"] = True
        if parallelism.get("offload_params") and stage != 3:
            raise ConfigImportError("zero_optimization.offload_param", f"DeepSpeed offloads "
                                    f"parameters only with stage 3, not stage {stage}")
        if parallelism.get("offload_optimizer") and stage == 0:
            raise ConfigImportError("zero_optimization.offload_optimizer",
                                    "ZeRO-Offload needs stage 1, 2 or 3")
    parallelism["zero"] = stage
    optimizer = ds.sub("optimizer")
    if optimizer is None:
        notes.append("no optimizer section: the optimizer is built in code (or by the HF "
                     "Trainer); assumed AdamW")
    else:
        kind = str(optimizer.get("type", "")).lower()
        params = optimizer.sub("params") or _Reader({}, "optimizer.params.", ds.inert)
        param = params.get
        if kind in ("adam", "adamw"):
            adam_w = param("adam_w_mode", True)  # DeepSpeed's Adam defaults to AdamW
            training["optimizer"] = "adam" if kind == "adam" and adam_w is False else "adamw"
            if kind == "adam" and adam_w is not False:
                notes.append("optimizer.type Adam: DeepSpeed defaults to adam_w_mode true, so "
                             "this is AdamW (the same memory either way)")
            training["optimizer_impl"] = "foreach" if param("torch_adam", False) else "fused"
        elif kind == "lion":
            training["optimizer"] = "lion"
        elif kind == "sgd":
            training["optimizer"] = "sgd_momentum" if param("momentum", 0) else "sgd"
        elif kind in _DS_LIKE:
            training["optimizer"] = _DS_LIKE[kind]
            notes.append(f"optimizer.type {optimizer.data.get('type')}: estimated as "
                         f"{_DS_LIKE[kind]} (the same optimizer states)")
        else:
            training["optimizer"] = "adamw"
            notes.append(f"optimizer.type {optimizer.data.get('type')!r}: not known; "
                         "estimated as AdamW")
    ckpt = ds.sub("activation_checkpointing")
    if ckpt is not None:
        training["activation_checkpointing"] = "full"
        notes.append("activation_checkpointing: the section configures deepspeed.checkpointing; "
                     "it takes effect only if the model calls it (HF models: "
                     "gradient_checkpointing_enable()); imported as full")
        for key, what in (("partition_activations", "splits the checkpoints over tp ranks"),
                          ("cpu_checkpointing", "moves the checkpoints to the CPU")):
            if ckpt.get(key, False):
                notes.append(f"activation_checkpointing.{key}: {what}; not modelled, the "
                             "estimate keeps them on the GPU")
        ckpt.get("contiguous_memory_optimization")
        ckpt.get("number_checkpoints")
    return _DeepSpeedResult(training, parallelism, batch, (enabled[0], enabled[1]))


def _precision_from_flags(bf16: Any, fp16: Any, mixed: str, where: str) -> dict[str, Any]:
    if bf16 is True and fp16 is True:
        raise ConfigImportError(where, "bf16 and fp16 cannot both be enabled")
    if bf16 is True:
        return {"precision": "bf16", "mixed_precision": mixed}
    if fp16 is True:
        return {"precision": "fp16", "mixed_precision": mixed}
    return {"precision": "fp32", "mixed_precision": "pure"}


def _batch_and_dp(
    micro: Any, accumulation: Any, total: Any, dp: int | None, notes: list[str],
    where: str = "",
) -> tuple[int, int, int]:
    """DeepSpeed's rule train_batch_size = micro x accumulation x dp, solved for what is
    missing (`None`: not given or "auto")."""
    names = (f"{where}train_micro_batch_size_per_gpu", f"{where}gradient_accumulation_steps",
             f"{where}train_batch_size")
    vals: list[int | None] = []
    for name, value in zip(names, (micro, accumulation, total), strict=True):
        if value is None or value == _AUTO:
            vals.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigImportError(name, f"must be a positive integer, got {value!r}")
        vals.append(value)
    m, g, t = vals
    if t is None:
        if dp is None:
            notes.append("dp: not in the config; assumed 1 (set dp, the number of GPUs)")
        dp = dp or 1
        return m or 1, g or 1, dp
    if dp is None:
        if m is None or g is None:
            notes.append(f"{names[2]} {t} without both micro-batch and accumulation: the "
                         "missing one assumed 1")
            m, g = (m or 1), (g or 1)
        if t % (m * g):
            raise ConfigImportError(names[2], f"{t} is not a multiple of micro-batch x "
                                    f"accumulation ({m} x {g})")
        return m, g, t // (m * g)
    if m is None and g is None:
        m = 1
    if m is None:
        assert g is not None
        if t % (g * dp):
            raise ConfigImportError(names[2], f"{t} is not a multiple of accumulation x dp "
                                    f"({g} x {dp})")
        return t // (g * dp), g, dp
    if g is None:
        if t % (m * dp):
            raise ConfigImportError(names[2], f"{t} is not a multiple of micro-batch x dp "
                                    f"({m} x {dp})")
        return m, t // (m * dp), dp
    if m * g * dp != t:
        raise ConfigImportError(names[2], f"{t} != micro-batch x accumulation x dp "
                                f"({m} x {g} x {dp} = {m * g * dp})")
    return m, g, dp


def _import_deepspeed(data: dict[str, Any], dp: int | None, notes: list[str]
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    ds = _Reader(data, "", _DS_INERT)
    r = _deepspeed_settings(ds, notes)
    training, parallelism = r.training, r.parallelism
    for name, value in zip(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                            "train_batch_size"), r.batch, strict=True):
        if value == _AUTO:
            notes.append(f"{name} auto: filled in by the HF Trainer; import the "
                         "TrainingArguments (--format hf-trainer) for the real value")
    m, g, dp = _batch_and_dp(*r.batch, dp, notes)
    training |= {"micro_batch_size": m, "gradient_accumulation_steps": g}
    parallelism["dp"] = dp
    bf16, fp16 = r.precision
    if _AUTO in (bf16, fp16):
        notes.append("bf16/fp16 enabled auto: set by the HF Trainer from its bf16/fp16 "
                     "flags; assumed bf16")
        bf16, fp16 = (True, False) if bf16 == _AUTO else (bf16, fp16)
    if "mixed_precision" not in training:
        training |= _precision_from_flags(bf16, fp16, "master", "fp16.enabled")
    else:
        training["precision"] = "fp16" if fp16 is True else "bf16"
    _finish([ds], notes)
    return training, parallelism


# ---------------------------------------------------------------------------------------------
# Accelerate
# ---------------------------------------------------------------------------------------------

_ACCELERATE_INERT = frozenset({
    "compute_environment", "debug", "machine_rank", "main_process_ip", "main_process_port",
    "main_training_function", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster",
    "tpu_use_sudo", "enable_cpu_affinity", "gpu_ids", "downcast_bf16", "num_machines",
    "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params",
    "fsdp_backward_prefetch", "fsdp_backward_prefetch_policy", "fsdp_forward_prefetch",
    "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params",
    "fsdp_cpu_ram_efficient_loading", "zero3_init_flag", "zero3_save_16bit_model",
    "gradient_clipping", "deepspeed_multinode_launcher", "dynamo_config", "ipex_config",
    "mpirun_config", "tpu_name", "tpu_zone", "commands", "command_file",
})

# FSDP1 sharding strategies (names, or the enum's integers in older configs) -> zero stage.
_SHARDING = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3,
             "_HYBRID_SHARD_ZERO2": 2, "HYBRID_SHARD_ZERO2": 2}
_SHARDING_ENUM = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD",
                  5: "_HYBRID_SHARD_ZERO2"}


def _fsdp_stage(value: Any, where: str, notes: list[str]) -> int:
    if isinstance(value, bool):  # FSDP2's fsdp_reshard_after_forward
        return 3 if value else 2
    name = _SHARDING_ENUM.get(value, value) if isinstance(value, int) else str(value).upper()
    if name not in _SHARDING:
        raise ConfigImportError(where, f"unknown sharding strategy {value!r}; known: "
                                f"{', '.join(_SHARDING)}")
    if "HYBRID" in name:
        notes.append(f"{where} {name}: shards within a node and replicates across nodes; "
                     "estimated as sharding over all dp ranks (less memory than the job uses "
                     "on more than one node)")
    return _SHARDING[name]


def _import_accelerate(data: dict[str, Any], dp: int | None, notes: list[str]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    cfg = _Reader(data, "", _ACCELERATE_INERT | _DS_INERT)
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {}
    kind = str(cfg.get("distributed_type", "NO")).upper()
    if _flag(cfg, "use_cpu"):
        raise ConfigImportError("use_cpu", "is true: the job runs on the CPU, not a GPU")
    processes = cfg.get("num_processes", 1)
    processes = _positive(cfg, "num_processes", processes)
    if dp is not None and dp != processes:
        notes.append(f"dp {dp} given; the config says num_processes {processes}")
    dp = dp or processes
    mixed = cfg.get("mixed_precision", "no")
    if mixed is False:  # an unquoted `no` read as YAML 1.1
        mixed = "no"
    if mixed not in ("no", "bf16", "fp16", "fp8"):
        raise ConfigImportError("mixed_precision", f"must be no, bf16, fp16 or fp8, got "
                                f"{mixed!r}")
    low_precision = "amp"
    if kind == "FSDP":
        fsdp = cfg.sub("fsdp_config") or _Reader({}, "fsdp_config.", cfg.inert)
        version = fsdp.get("fsdp_version", 1)
        if version not in (1, 2):
            raise ConfigImportError("fsdp_config.fsdp_version", f"must be 1 or 2, got {version!r}")
        if version == 1:
            notes.append("fsdp_version 1: FSDP1 flat parameters; the estimate models FSDP2 "
                         "(per-parameter sharding), usually within a few percent")
        stages = {}
        for key in ("fsdp_reshard_after_forward", "fsdp_sharding_strategy"):
            value = fsdp.get(key)
            if value is not None:
                stages[key] = _fsdp_stage(value, f"fsdp_config.{key}", notes)
        if len(set(stages.values())) > 1:
            raise ConfigImportError("fsdp_config.fsdp_sharding_strategy",
                                    f"contradicts fsdp_reshard_after_forward ({stages})")
        parallelism["zero"] = next(iter(stages.values()), 3)  # Accelerate's default FULL_SHARD
        offload = _flag(fsdp, "fsdp_offload_params")
        parallelism["offload_params"] = parallelism["offload_optimizer"] = offload
        if offload and parallelism["zero"] < 2:
            raise ConfigImportError("fsdp_config.fsdp_offload_params", "offload with NO_SHARD "
                                    "is not modelled; shard (FULL_SHARD) to offload")
        if _flag(fsdp, "fsdp_activation_checkpointing"):
            training["activation_checkpointing"] = "full"
    elif kind == "DEEPSPEED":
        ds = cfg.sub("deepspeed_config") or _Reader({}, "deepspeed_config.", cfg.inert)
        if ds.get("deepspeed_config_file"):
            raise ConfigImportError("deepspeed_config.deepspeed_config_file",
                                    "the settings are in that file: import it with "
                                    "--format deepspeed")
        stage = ds.get("zero_stage", 2)
        if stage not in (0, 1, 2, 3):
            raise ConfigImportError("deepspeed_config.zero_stage", f"must be 0-3, got {stage!r}")
        parallelism["zero"] = stage
        for key, field in (("offload_optimizer_device", "offload_optimizer"),
                           ("offload_param_device", "offload_params")):
            device = ds.get(key, "none")
            if device not in ("none", "cpu", "nvme", None):
                raise ConfigImportError(f"deepspeed_config.{key}", f"must be none, cpu or "
                                        f"nvme, got {device!r}")
            parallelism[field] = device in ("cpu", "nvme")
        if parallelism["offload_params"] and stage != 3:
            raise ConfigImportError("deepspeed_config.offload_param_device",
                                    "DeepSpeed offloads parameters only with zero_stage 3")
        if parallelism["offload_optimizer"] and stage == 0:
            raise ConfigImportError("deepspeed_config.offload_optimizer_device",
                                    "ZeRO-Offload needs zero_stage 1, 2 or 3")
        accumulation = ds.get("gradient_accumulation_steps")
        if accumulation is not None:
            training["gradient_accumulation_steps"] = _positive(
                ds, "gradient_accumulation_steps", accumulation)
        low_precision = "master"
    elif kind in ("MULTI_GPU", "NO"):
        parallelism["zero"] = 0
        if kind == "NO" and dp > 1:
            raise ConfigImportError("distributed_type", f"NO (one process) contradicts "
                                    f"num_processes / dp {dp}")
    else:
        raise ConfigImportError("distributed_type", f"{kind} is not read by this importer "
                                "(FSDP, DEEPSPEED, MULTI_GPU, NO)")
    parallelism["dp"] = dp
    if mixed == "no":
        training |= {"precision": "fp32", "mixed_precision": "pure"}
        notes.append("mixed_precision no: fp32 training, or a model loaded in bf16/fp16 "
                     "(torch_dtype), which the config does not say; imported as fp32")
    else:
        training |= {"precision": mixed, "mixed_precision": low_precision}
        if mixed == "fp8":
            notes.append("mixed_precision fp8: the recipe (Transformer Engine, torchao, "
                         "MS-AMP) is not read")
            cfg.get("fp8_config")
    notes.append("micro-batch, gradient accumulation (FSDP), optimizer and sequence length are "
                 "set in the training script: scenario defaults used")
    _finish([cfg], notes)
    return training, parallelism


# ---------------------------------------------------------------------------------------------
# Hugging Face TrainingArguments
# ---------------------------------------------------------------------------------------------

_HF_INERT = frozenset({
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict",
    "eval_strategy", "evaluation_strategy", "prediction_loss_only", "per_device_eval_batch_size",
    "eval_accumulation_steps", "eval_delay", "learning_rate", "weight_decay", "adam_beta1",
    "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps", "log_level",
    "logging_dir", "logging_strategy", "logging_first_step", "logging_steps", "save_strategy",
    "save_steps", "save_total_limit", "save_safetensors", "save_only_model", "seed",
    "data_seed", "eval_steps", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_drop_last", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "run_name", "disable_tqdm", "remove_unused_columns", "label_names",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "report_to",
    "push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo",
    "resume_from_checkpoint", "ddp_find_unused_parameters", "ddp_timeout", "ddp_backend",
    "local_rank", "logging_nan_inf_filter", "include_tokens_per_second",
    "include_num_input_tokens_seen", "neftune_noise_alpha", "group_by_length",
    "length_column_name", "ignore_data_skip", "full_determinism", "tf32",
    "transformer_layer_cls_to_wrap", "backward_prefetch", "forward_prefetch",
    "use_orig_params", "sync_module_states", "cpu_ram_efficient_loading", "xla",
    "limit_all_gathers", "min_num_params", "dataset_text_field", "dataset_num_proc",
    "completion_only_loss", "assistant_only_loss", "dataset_kwargs", "eval_packing",
})

_HF_OPTIM: dict[str, tuple[str, str | None]] = {
    "adamw_torch": ("adamw", "foreach"), "adamw_torch_fused": ("adamw", "fused"),
    "adamw_hf": ("adamw", "for_loop"), "adamw_apex_fused": ("adamw", "fused"),
    "adamw_bnb_8bit": ("adamw_8bit", None), "adamw_8bit": ("adamw_8bit", None),
    "paged_adamw_8bit": ("adamw_8bit", None), "paged_adamw_32bit": ("adamw", "foreach"),
    "adafactor": ("adafactor", None), "sgd": ("sgd", None), "lion_32bit": ("lion", None),
    "paged_lion_32bit": ("lion", None), "adamw_torch_npu_fused": ("adamw", "fused"),
}
_HF_DEFAULT_BATCH = 8  # TrainingArguments.per_device_train_batch_size's default


def _hf_fsdp(value: Any, notes: list[str]) -> tuple[int, bool]:
    if value is True:  # `fsdp=True`: full_shard
        return 3, False
    if value is None or value is False:
        return 0, False
    if isinstance(value, str):
        options: list[Any] = value.split()
    elif isinstance(value, list):
        options = value
    else:  # TrainingArguments.fsdp is list[FSDPOption] | str | bool
        raise ConfigImportError("fsdp", "must be a string of options (\"full_shard offload\"), "
                                f"a list of them or true/false, got {value!r}")
    options = [str(o).lower() for o in options]
    stage, offload = 0, False
    for option in options:
        if option in ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2",
                      "no_shard"):
            stage = _fsdp_stage(option.upper(), "fsdp", notes)
        elif option == "offload":
            offload = True
        elif option != "auto_wrap":
            raise ConfigImportError("fsdp", f"unknown option {option!r}")
    if options and stage == 0 and "no_shard" not in options:
        stage = 3  # the Trainer reads a bare option list as full_shard
    return stage, offload


def _import_hf_trainer(data: dict[str, Any], dp: int | None, notes: list[str]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    args = _Reader(data, "", _HF_INERT)
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {"zero": 0}
    micro = args.get("per_device_train_batch_size")
    if micro is None:
        notes.append(f"per_device_train_batch_size not given: TrainingArguments' default "
                     f"{_HF_DEFAULT_BATCH}")
        micro = _HF_DEFAULT_BATCH
    micro = _positive(args, "per_device_train_batch_size", micro)
    accumulation = _positive(args, "gradient_accumulation_steps",
                             args.get("gradient_accumulation_steps", 1))
    bf16, fp16 = _flag(args, "bf16"), _flag(args, "fp16")
    if args.get("bf16_full_eval") or args.get("fp16_full_eval"):
        notes.append("bf16/fp16_full_eval: evaluation only")
    for key in ("max_length", "max_seq_length"):  # TRL's SFTConfig
        if (value := args.get(key)) is not None:
            training["seq_len"] = _positive(args, key, value)
            notes.append(f"{key} {value} (TRL SFTConfig): read as seq_len, the longest "
                         "sequence the step sees")
    if args.get("packing"):
        notes.append("packing: sequences are packed to max_length; seq_len is that length")
    # transformers 5 names it activation_checkpointing(_kwargs); gradient_checkpointing(_kwargs)
    # are deprecated aliases, read only where the new name is unset (TrainingArguments
    # __post_init__, transformers 5.23)
    for new, old in (("activation_checkpointing", "gradient_checkpointing"),
                     ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs")):
        if args.get(new) is not None and args.get(old) is not None:
            notes.append(f"{old}: a deprecated alias, ignored since {new} is set")
    key = "activation_checkpointing" if args.get("activation_checkpointing") is not None \
        else "gradient_checkpointing"
    if args.get(key) is not None and _flag(args, key):
        training["activation_checkpointing"] = "full"
        kw_key = "activation_checkpointing_kwargs" \
            if args.get("activation_checkpointing_kwargs") is not None \
            else "gradient_checkpointing_kwargs"
        kwargs = args.get(kw_key) or {}
        if not isinstance(kwargs, dict):
            raise ConfigImportError(kw_key, f"must be a mapping, got {kwargs!r}")
        every = kwargs.get("every_n_layers", 1)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigImportError(f"{kw_key}.every_n_layers",
                                    f"must be a positive integer, got {every!r}")
        if every > 1:
            training["_every_n_layers"] = every  # layers checkpointed: set once the model is known
        if kwargs.get("offload"):
            notes.append(f"{kw_key}.offload: saved activations held in host memory; not "
                         "modelled, so the estimate keeps them on the GPU (conservative)")
        if set(kwargs) - {"every_n_layers", "offload"}:
            notes.append(f"{kw_key}: {', '.join(sorted(set(kwargs) - {'every_n_layers', 'offload'}))}"
                         ": torch.utils.checkpoint options; reentrant or not, the same memory")
    optim = args.get("optim")
    if optim is None:
        notes.append("optim not given: transformers' default adamw_torch assumed (recent "
                     "releases default to adamw_torch_fused)")
        optim = "adamw_torch"
    if optim not in _HF_OPTIM:
        training["optimizer"] = "adamw"
        notes.append(f"optim {optim}: not modelled; estimated as AdamW")
    else:
        training["optimizer"], impl = _HF_OPTIM[optim]
        if impl is not None:
            training["optimizer_impl"] = impl
        if optim.startswith("paged_"):
            notes.append(f"optim {optim}: paged states can spill to host memory; not modelled")
        if training["optimizer"] == "adamw" and "weight_decay" in data \
                and data["weight_decay"] == 0:
            training["optimizer"] = "adam"  # the export writes Adam as AdamW with decay 0
    for key in ("optim_args", "optim_target_modules"):
        if args.get(key):
            notes.append(f"{key}: not modelled")
    if _flag(args, "use_liger_kernel"):
        training["loss"] = "chunked"
        notes.append("use_liger_kernel: chunked cross-entropy (Liger's RMSNorm, RoPE and "
                     "SwiGLU kernels are not modelled apart)")
    if _flag(args, "torch_compile"):
        notes.append("torch_compile: compiled kernels can save activation memory; not modelled")
    deepspeed, fsdp = args.get("deepspeed"), args.get("fsdp")
    if deepspeed and fsdp:
        raise ConfigImportError("deepspeed", "contradicts fsdp: the Trainer runs one of them")
    readers = [args]
    if isinstance(deepspeed, str):
        raise ConfigImportError("deepspeed", f"is a file path ({deepspeed}); embed its JSON "
                                "here or import it with --format deepspeed")
    if deepspeed:
        if not isinstance(deepspeed, dict):
            raise ConfigImportError("deepspeed", "must be a JSON object or a path")
        ds = _Reader(deepspeed, "deepspeed.", _DS_INERT | _HF_INERT)
        readers.append(ds)
        r = _deepspeed_settings(ds, notes)
        if "optimizer" in r.training and "optim" in data:
            notes.append("optim: the deepspeed config's optimizer section takes precedence")
        training |= r.training
        if training.get("optimizer") not in ("adamw", "adam"):
            training.pop("optimizer_impl", None)
        parallelism |= r.parallelism
        # The Trainer fills "auto" from its arguments and rejects values that disagree.
        ds_micro, ds_acc, ds_total = r.batch
        for name, mine, theirs in (("train_micro_batch_size_per_gpu", micro, ds_micro),
                                   ("gradient_accumulation_steps", accumulation, ds_acc)):
            if theirs not in (None, _AUTO) and theirs != mine:
                raise ConfigImportError(f"deepspeed.{name}", f"{theirs} contradicts the "
                                        f"TrainingArguments value {mine}")
        micro, accumulation, dp = _batch_and_dp(micro, accumulation, ds_total, dp, notes,
                                                "deepspeed.")
        for name, mine, theirs in (("bf16", bf16, r.precision[0]), ("fp16", fp16, r.precision[1])):
            if theirs != _AUTO and bool(theirs) != mine:
                raise ConfigImportError(f"deepspeed.{name}.enabled", f"{theirs} contradicts "
                                        f"TrainingArguments {name}={mine}")
        if "mixed_precision" not in training:
            training |= _precision_from_flags(bf16, fp16, "master", "bf16")
        else:
            training["precision"] = "fp16" if fp16 else "bf16"
    else:
        if dp is None:
            notes.append("dp: TrainingArguments do not say how many GPUs; assumed 1 (set dp)")
        dp = dp or 1
        training |= _precision_from_flags(bf16, fp16, "amp", "bf16")
        if fsdp:
            stage, offload = _hf_fsdp(fsdp, notes)
            parallelism["zero"] = stage
            parallelism["offload_optimizer"] = parallelism["offload_params"] = offload
            notes.append("fsdp: TrainingArguments' FSDP (FSDP1 flat parameters unless "
                         "fsdp_config sets fsdp_version 2); the estimate models FSDP2")
            fsdp_cfg = args.sub("fsdp_config")
            if fsdp_cfg is not None:
                # transformers 5 reads these with or without the "fsdp_" prefix
                def setting(key: str) -> Any:
                    value = fsdp_cfg.get(key)
                    return fsdp_cfg.get(f"fsdp_{key}") if value is None else value

                if setting("activation_checkpointing"):
                    training["activation_checkpointing"] = "full"
                reshard = setting("reshard_after_forward")
                if isinstance(reshard, bool) and parallelism["zero"] == 3 and not reshard:
                    parallelism["zero"] = 2  # FSDP2 without resharding: ZeRO-2's layout
                if setting("cpu_offload"):
                    parallelism["offload_optimizer"] = parallelism["offload_params"] = True
                setting("version")
                readers.append(fsdp_cfg)
    training |= {"micro_batch_size": micro, "gradient_accumulation_steps": accumulation}
    parallelism["dp"] = dp
    _finish(readers, notes)
    return training, parallelism


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

_IMPORTERS = {"deepspeed": _import_deepspeed, "accelerate-fsdp": _import_accelerate,
              "hf-trainer": _import_hf_trainer}


def import_config(
    text_or_dict: str | bytes | dict[str, Any], format: ImportFormat, *, model: Any,
    gpu: str | None = None, dp: int | None = None, seq_len: int | None = None,
) -> Imported:
    """The scenario a framework config describes, and notes on what it leaves out.

    `model` is a preset id (or any scenario `model`); `dp` the number of data-parallel GPUs,
    when the config does not imply it; `seq_len` the tokens per sequence (configs do not say,
    except TRL's `max_length`; default: the scenario default within the model's positions).

        >>> s, notes = import_config('{"train_micro_batch_size_per_gpu": 2, '
        ...     '"gradient_accumulation_steps": 4, "train_batch_size": 64, '
        ...     '"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}',
        ...     "deepspeed", model="llama-3.1-8b")
        >>> s.parallelism.dp, s.parallelism.zero, s.training.mixed_precision
        (8, 3, 'master')
    """
    if format not in IMPORT_FORMATS:
        raise ConfigImportError("format", f"unknown format {format!r}; known: "
                                f"{', '.join(IMPORT_FORMATS)}")
    if dp is not None and dp < 1:
        raise ConfigImportError("dp", f"must be at least 1, got {dp}")
    data = _load(text_or_dict, yaml=format == "accelerate-fsdp")
    notes: list[str] = []
    training, parallelism = _IMPORTERS[format](data, dp, notes)
    every = training.pop("_every_n_layers", None)
    if every:  # transformers checkpoints layers 0, n, 2n, ...: ceil(L / n) of them
        layers = resolve(parse_scenario({"model": model, "training": {"seq_len": 1}})
                         ).arch.num_hidden_layers
        training["recompute_layers"] = -(-layers // every)
        notes.append(f"activation checkpointing every {every} layers: "
                     f"{training['recompute_layers']} of {layers} layers checkpointed")
    if seq_len is not None:
        training["seq_len"] = seq_len
    elif "seq_len" not in training:
        default = Training().seq_len
        probe = parse_scenario({"model": model, "training": {"seq_len": 1}})
        max_pos = resolve(probe).arch.max_position_embeddings
        training["seq_len"] = min(default, max_pos)
        notes.append(f"seq_len: set by the data pipeline, not the config; "
                     f"{training['seq_len']} assumed (set seq_len)")
    scenario: dict[str, Any] = {"model": model, "training": training,
                                "parallelism": parallelism}
    if gpu is not None:
        scenario["gpu"] = gpu
    s = parse_scenario(scenario)
    resolve(s)  # the combination is checked here, as ScenarioError naming the field
    return Imported(s, tuple(notes))


__all__ = ["IMPORT_FORMATS", "ConfigImportError", "ImportFormat", "Imported", "import_config",
           "parse_yaml"]


# ---------------------------------------------------------------------------------------------
# The operation: calc import
# ---------------------------------------------------------------------------------------------

from typing import Annotated  # noqa: E402

from pydantic import Field  # noqa: E402

from ..errors import FieldError  # noqa: E402
from ..operations import Cli, Operation, Request, json_text  # noqa: E402

IMPORT_FORMAT_NAMES: dict[str, str] = {  # what each format's file is called, by its id
    "deepspeed": "DeepSpeed JSON", "accelerate-fsdp": "Accelerate YAML",
    "hf-trainer": "HF TrainingArguments (JSON)"}
IMPORT_EXAMPLES: dict[str, str] = {  # a short config of each format (the page's placeholder)
    "deepspeed": '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,\n'
                 ' "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}',
    "accelerate-fsdp": "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\n"
                       "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD",
    "hf-trainer": '{"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,\n'
                  ' "bf16": true, "activation_checkpointing": true}',
}


class ImportRequest(Request):
    format: ImportFormat = Field(title="Format", description="the config's format")
    text: Annotated[str, Cli(argument="config", file=True)] = Field(
        title="Configuration text", description="the config (on the command line a file, or - "
                                                "for stdin)")
    model: str | dict[str, Any] = Field(description="model preset id (or any scenario model)")
    gpu: str | None = Field(None, description="GPU preset id (default: the scenario default)")
    dp: int | None = Field(None, title="Data-parallel GPUs",
                           description="data-parallel GPUs, where the config does not say")
    seq_len: int | None = Field(None, title="Sequence length (tokens)", description=(
        "tokens per sequence (configs rarely say: default, the scenario's, noted)"))


def _import(q: ImportRequest) -> Imported:
    try:
        return import_config(q.text, q.format, model=q.model, gpu=q.gpu, dp=q.dp,
                             seq_len=q.seq_len)
    except FieldError:
        raise
    except Exception as exc:  # pasted text: whatever the importer trips on, say so, no traceback
        raise ConfigImportError("config", f"could not be read ({type(exc).__name__}: "
                                f"{exc})") from None


OPERATIONS: tuple[Operation[ImportRequest, Imported], ...] = (
    Operation("import", "a DeepSpeed / Accelerate / HF Trainer config as a scenario (pipe into "
              "calc estimate -)", ImportRequest, run=_import,
              text=lambda r, q: json_text(r.scenario.model_dump(mode="json")),
              data=lambda r, q: r.scenario.model_dump(mode="json"),
              browser=lambda r, q: r.as_dict(), notes=lambda r: r.notes),
)
