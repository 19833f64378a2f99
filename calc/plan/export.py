"""Framework configuration export: the scenario as DeepSpeed, Accelerate FSDP, torchtitan,
Megatron-LM or Hugging Face Trainer settings.

Every scenario setting is written into the output, named in `notes` or refused with an
:class:`ExportError` naming the field; nothing is dropped silently. The planning tools' name
for :mod:`calc.frameworks`, where each framework's module holds its export and import.
"""

from __future__ import annotations

from ..frameworks.common import DECODER_LAYER, Export, ExportError
from ..frameworks.registry import FORMATS, ExportFormat, export

__all__ = ["DECODER_LAYER", "FORMATS", "Export", "ExportError", "ExportFormat", "export"]
