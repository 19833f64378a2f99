"""Which framework formats calc writes and which it reads, each handled by its framework's
module, and the two entry points, `export` and `import_config`.

Export: every scenario setting is either written into the output, named in `notes` (it belongs
to another place: the model loading, peft, the data pipeline) or refused with an
`ExportError` naming the field, when the framework cannot run it that way. Nothing is
dropped silently. Learning rates and schedules are not part of a scenario and not exported.

Import, the natural start when debugging someone else's OOM: the configs name no model and
(mostly) no sequence length: the model is an argument, the sequence length stays the scenario
default unless the config has one (TRL's `max_length`), and every setting the importer does not
turn into a scenario field comes back in `notes`: settings that do not change memory are listed
together, the rest one note each. Nothing is dropped silently. Settings that contradict each
other (bf16 and fp16 both on, a DeepSpeed `train_batch_size` that is not micro-batch x
accumulation x dp) raise `ConfigImportError` naming the setting.

    >>> FORMATS
    ('deepspeed', 'accelerate-fsdp', 'torchtitan', 'megatron', 'hf-trainer')
    >>> IMPORT_FORMATS
    ('deepspeed', 'accelerate-fsdp', 'hf-trainer')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

from ..scenario import Resolved, Scenario, Training, parse_scenario, resolve
from . import accelerate, deepspeed, hf_trainer, megatron, torchtitan
from .common import ConfigImportError, Export, ExportError, Imported
from .reader import load

ExportFormat = Literal["deepspeed", "accelerate-fsdp", "torchtitan", "megatron", "hf-trainer"]
ImportFormat = Literal["deepspeed", "accelerate-fsdp", "hf-trainer"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)

Exporter = Callable[[Resolved], Export]
# (the config as a mapping, dp if the caller knows it, notes to add to) -> the scenario's
# training and parallelism settings
Importer = Callable[[dict[str, Any], int | None, list[str]],
                    tuple[dict[str, Any], dict[str, Any]]]

EXPORTERS: dict[ExportFormat, Exporter] = {
    "deepspeed": deepspeed.export_deepspeed,
    "accelerate-fsdp": accelerate.export_accelerate_fsdp,
    "torchtitan": torchtitan.export_torchtitan,
    "megatron": megatron.export_megatron,
    "hf-trainer": hf_trainer.export_hf_trainer,
}
IMPORTERS: dict[ImportFormat, Importer] = {
    "deepspeed": deepspeed.import_deepspeed,
    "accelerate-fsdp": accelerate.import_accelerate,
    "hf-trainer": hf_trainer.import_hf_trainer,
}
assert tuple(EXPORTERS) == FORMATS and tuple(IMPORTERS) == IMPORT_FORMATS

FORMAT_NAMES: dict[str, str] = {  # what each format is called, by its id
    "deepspeed": "DeepSpeed", "accelerate-fsdp": "Accelerate FSDP", "torchtitan": "torchtitan",
    "megatron": "Megatron-LM", "hf-trainer": "HF Trainer"}
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


def export(scenario: Scenario | dict[str, Any] | str, format: ExportFormat) -> Export:
    """The scenario as `format`'s configuration; `ExportError` where it cannot be.

        >>> e = export({"model": "llama-3-8b", "training": {"mixed_precision": "master"},
        ...             "parallelism": {"dp": 8, "zero": 3}}, "deepspeed")
        >>> e.data["zero_optimization"]["stage"], e.data["train_batch_size"]
        (3, 8)
    """
    if format not in FORMATS:
        raise ExportError("format", f"unknown format {format!r}; known: {', '.join(FORMATS)}")
    r = resolve(parse_scenario(scenario))
    return EXPORTERS[format](r)


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
    data = load(text_or_dict, yaml=format == "accelerate-fsdp")
    notes: list[str] = []
    training, parallelism = IMPORTERS[format](data, dp, notes)
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


__all__ = ["EXPORTERS", "FORMATS", "IMPORTERS", "IMPORT_FORMATS", "ExportFormat", "Exporter",
           "ImportFormat", "Importer", "export", "import_config"]
