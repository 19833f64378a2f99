"""Training frameworks' configurations: a scenario written as one (export) and one read back as
a scenario (import), one module per framework holding both directions and its name maps.

- `.registry`: which formats export and which import; `export`, `import_config`;
- `.deepspeed`: DeepSpeed's JSON config, both ways;
- `.accelerate`: Accelerate's YAML (FSDP2 written; FSDP1/2, DeepSpeed, DDP read);
- `.hf_trainer`: Hugging Face `TrainingArguments`, both ways (DeepSpeed nested);
- `.torchtitan`: torchtitan 0.3.0's command line (export only);
- `.megatron`: Megatron-LM's command line (export only);
- `.common`: the result and error types and the rules several frameworks share;
- `.reader`: reading a config with every key accounted for;
- `.yaml`: the YAML subset Accelerate's files use, read and written.

Optimizer names are each framework's own; the optimizers they name are `calc.optimizers`'.

    >>> e = export({"model": "gpt2", "training": {"seq_len": 1024},
    ...             "parallelism": {"dp": 2, "zero": 3}}, "accelerate-fsdp")
    >>> e.data["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"]
    'GPT2Block'
"""

from .common import DECODER_LAYER, ConfigImportError, Export, ExportError, Imported
from .registry import (
    EXPORTERS,
    FORMATS,
    IMPORT_FORMATS,
    IMPORTERS,
    ExportFormat,
    ImportFormat,
    export,
    import_config,
)
from .yaml import parse_yaml, to_yaml

__all__ = [
    "DECODER_LAYER", "EXPORTERS", "FORMATS", "IMPORTERS", "IMPORT_FORMATS", "ConfigImportError",
    "Export", "ExportError", "ExportFormat", "ImportFormat", "Imported", "export",
    "import_config", "parse_yaml", "to_yaml",
]
