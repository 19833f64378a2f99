"""Framework configuration export: the scenario as DeepSpeed, Accelerate FSDP, torchtitan,
Megatron-LM or Hugging Face Trainer settings, and the `calc export` operation.

Every scenario setting is written into the output, named in `notes` or refused with an
`ExportError` naming the field; nothing is dropped silently. The planning tools' name
for `calc.frameworks`, where each framework's module holds its export and import.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..frameworks.common import DECODER_LAYER, Export, ExportError
from ..frameworks.registry import FORMAT_NAMES, FORMATS, ExportFormat, export
from ..operations import SCENARIO_HELP, Operation, Request


class ExportRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    format: ExportFormat = Field(title="Configuration for", description="the framework",
                                 examples=["accelerate-fsdp"])


OPERATIONS: tuple[Operation[ExportRequest, Export], ...] = (
    Operation("export", "framework configuration for the scenario", ExportRequest,
              run=lambda q: export(q.scenario, q.format), text=lambda e, q: e.text.rstrip("\n"),
              notes=lambda e: e.notes),
)

__all__ = ["DECODER_LAYER", "FORMATS", "FORMAT_NAMES", "Export", "ExportError", "ExportFormat",
           "export"]
