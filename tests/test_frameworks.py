"""The framework modules and the optimizer table agree: every optimizer calc models is exported
or refused by name in every format, and every framework name an importer reads means an
optimizer (and implementation) of the table."""

from typing import get_args

import pytest

from calc.architecture import ModelType
from calc.errors import FieldError
from calc.frameworks import DECODER_LAYER, FORMATS, ExportError, export, import_config
from calc.frameworks.deepspeed import OPTIMIZER_TYPES, SIMILAR
from calc.frameworks.hf_trainer import OPTIM
from calc.frameworks.torchtitan import OPTIMIZER_NAMES
from calc.optimizers import ALL_IMPLEMENTATIONS, OPTIMIZERS

# A scenario each format exports with AdamW, so that a refusal below is about the optimizer.
BASE = {
    "deepspeed": {"model": "llama-3.2-1b", "training": {"mixed_precision": "master"},
                  "parallelism": {"dp": 2, "zero": 2}},
    "accelerate-fsdp": {"model": "llama-3.2-1b", "parallelism": {"dp": 2, "zero": 3}},
    "torchtitan": {"model": "llama-3-8b", "training": {"seq_len": 2048},
                   "parallelism": {"dp": 8, "zero": 3}},
    "megatron": {"model": "llama-3.2-1b", "training": {"mixed_precision": "master"},
                 "parallelism": {"dp": 2, "zero": 1}},
    "hf-trainer": {"model": "llama-3.2-1b", "parallelism": {"dp": 2}},
}
ROUND_TRIP = ("deepspeed", "hf-trainer")  # formats whose config names the optimizer


def _with(fmt: str, optimizer: str, impl: str) -> dict:
    base = BASE[fmt]
    return {**base, "training": {**base.get("training", {}), "optimizer": optimizer,
                                 "optimizer_impl": impl}}


def test_every_format_has_a_base_scenario() -> None:
    assert set(BASE) == set(FORMATS)
    for fmt in FORMATS:
        export(_with(fmt, "adamw", "fused"), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("impl", ALL_IMPLEMENTATIONS)
def test_every_optimizer_is_exported_or_refused_by_name(fmt, optimizer, impl) -> None:
    """A new optimizer in calc.optimizers cannot crash an export (a KeyError in a name map):
    each format writes it or says which setting it cannot express. Where the config names
    the optimizer, importing the export gives the same optimizer back."""
    scenario = _with(fmt, optimizer, impl)
    try:
        e = export(scenario, fmt)
    except ExportError as exc:
        assert exc.field in ("training.optimizer", "training.optimizer_impl"), exc
        return
    if fmt in ROUND_TRIP:
        s, _ = import_config(e.text, fmt, model=scenario["model"], dp=2)
        assert s.training.optimizer == optimizer
        if optimizer in ("adamw", "adam"):
            assert s.training.optimizer_impl == impl


def test_export_name_maps_name_optimizers_of_the_table() -> None:
    for names in (OPTIMIZER_TYPES, OPTIMIZER_NAMES):
        assert set(names) <= set(OPTIMIZERS)


@pytest.mark.parametrize(("name", "want"), sorted(OPTIM.items()))
def test_hf_optim_names_import_as_optimizers_of_the_table(name, want) -> None:
    optimizer, impl = want
    assert optimizer in OPTIMIZERS
    assert impl is None or impl in OPTIMIZERS[optimizer].implementations
    s, _ = import_config({"optim": name}, "hf-trainer", model="gpt2", seq_len=512)
    assert s.training.optimizer == optimizer
    if impl is not None:
        assert s.training.optimizer_impl == impl


@pytest.mark.parametrize("kind", sorted({*OPTIMIZER_TYPES.values(), *SIMILAR}))
def test_deepspeed_optimizer_types_import_as_optimizers_of_the_table(kind) -> None:
    s, _ = import_config({"optimizer": {"type": kind}}, "deepspeed", model="gpt2", seq_len=512)
    assert s.training.optimizer in OPTIMIZERS
    if kind in SIMILAR:
        assert s.training.optimizer == SIMILAR[kind]
    else:  # Adam without adam_w_mode false is DeepSpeed's default AdamW
        assert OPTIMIZER_TYPES[s.training.optimizer] in (kind, "AdamW")


def test_unknown_format_is_a_field_error() -> None:
    with pytest.raises(FieldError) as exc:
        export(BASE["deepspeed"], "colossalai")  # type: ignore[arg-type]
    assert exc.value.field == "format"


def test_every_model_type_has_a_decoder_layer_class() -> None:
    """FSDP's auto-wrap in the Accelerate and HF Trainer exports names the decoder layer by
    its transformers class: a model type without one would fail with a KeyError."""
    assert set(get_args(ModelType)) <= set(DECODER_LAYER)


def _pipelined(fmt: str, schedule: str, v: int = 1) -> dict:
    base = BASE[fmt]
    return {**base, "training": {**base.get("training", {}), "gradient_accumulation_steps": 8},
            "parallelism": {**base["parallelism"], "pp": 2, "pipeline_schedule": schedule,
                            "virtual_stages": v}}


def test_interleaved_pipelines_export_their_chunks() -> None:
    """llama-3.2-1b has 16 layers: pp 2 x 2 virtual stages is 4 layers a chunk."""
    assert "--num-layers-per-virtual-pipeline-stage 4" in \
        export(_pipelined("megatron", "interleaved_1f1b", 2), "megatron").text
    text = export({**_pipelined("torchtitan", "interleaved_1f1b", 2),
                   "model": "llama-3.1-8b"}, "torchtitan").text
    assert "pipeline_parallel_schedule Interleaved1F1B" in text
    assert "pipeline_parallel_layers_per_stage 8" in text
    assert "pipeline_parallel_schedule GPipe" in export(_pipelined("torchtitan", "gpipe"),
                                                         "torchtitan").text
    v = export({**_pipelined("torchtitan", "dualpipev"), "model": "llama-3.1-8b"},
               "torchtitan").text
    assert "pipeline_parallel_schedule DualPipeV" in v  # 32 layers in 2 pp = 4 chunks: 8 each
    assert "pipeline_parallel_layers_per_stage 8" in v


@pytest.mark.parametrize(("fmt", "schedule"), [("megatron", "gpipe"), ("megatron", "dualpipe"),
                                               ("torchtitan", "zero_bubble"),
                                               ("torchtitan", "dualpipe")])
def test_schedules_a_framework_lacks_are_refused_by_name(fmt: str, schedule: str) -> None:
    with pytest.raises(ExportError) as err:
        export(_pipelined(fmt, schedule), fmt)
    assert err.value.field == "parallelism.pipeline_schedule"


def test_torchtitan_refuses_fsdp_on_one_gpu_by_name() -> None:
    """torchtitan applies FSDP only over a dimension with ranks: its command on one GPU would
    train unwrapped, unlike the estimate (FSDP wrapping one rank)."""
    with pytest.raises(ExportError) as err:
        export({"model": "llama-3.1-8b", "parallelism": {"zero": 3}}, "torchtitan")
    assert err.value.field == "parallelism.zero"


def test_deepspeed_qlora_on_one_gpu_packs_the_4bit_weights_as_estimated() -> None:
    scenario = {"model": "llama-3.2-1b", "parallelism": {"zero": 3},
                "training": {"finetuning": "qlora", "mixed_precision": "master"}}
    out = export(scenario, "deepspeed")
    assert any("bnb_4bit_quant_storage=torch.bfloat16" in note for note in out.notes)
