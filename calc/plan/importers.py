"""Framework configuration import: a DeepSpeed, Accelerate or Hugging Face Trainer config as
a scenario, the natural start when debugging someone else's OOM (the reverse of
`export`), and the `calc import` operation.

Every key of the config is read into the scenario, named in `notes` or (when settings
contradict each other) refused with a `ConfigImportError` naming the setting. The
planning tools' name for `calc.frameworks`, where each framework's module holds its
import and export; `parse_yaml` is the YAML subset Accelerate's files use.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from ..frameworks.common import ConfigImportError, Imported
from ..frameworks.registry import (
    IMPORT_EXAMPLES,
    IMPORT_FORMAT_NAMES,
    IMPORT_FORMATS,
    ImportFormat,
    import_config,
)
from ..frameworks.yaml import parse_yaml
from ..operations import Cli, Operation, Request, json_text


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


OPERATIONS: tuple[Operation[ImportRequest, Imported], ...] = (
    Operation("import", "a DeepSpeed / Accelerate / HF Trainer config as a scenario (pipe into "
              "calc estimate -)", ImportRequest,
              run=lambda q: import_config(q.text, q.format, model=q.model, gpu=q.gpu, dp=q.dp,
                                          seq_len=q.seq_len),
              text=lambda r, q: json_text(r.scenario.model_dump(mode="json")),
              data=lambda r, q: r.scenario.model_dump(mode="json"),
              browser=lambda r, q: r.as_dict(), notes=lambda r: r.notes),
)

__all__ = ["IMPORT_EXAMPLES", "IMPORT_FORMATS", "IMPORT_FORMAT_NAMES", "ConfigImportError",
           "ImportFormat", "Imported", "import_config", "parse_yaml"]
