"""Framework configuration import: a DeepSpeed, Accelerate or Hugging Face Trainer config as
a scenario, the natural start when debugging someone else's OOM. The reverse of :mod:`export`.

Every key of the config is read into the scenario, named in `notes` or (when settings
contradict each other) refused with a :class:`ConfigImportError` naming the setting. The
planning tools' name for :mod:`calc.frameworks`, where each framework's module holds its
import and export; :func:`parse_yaml` is the YAML subset Accelerate's files use.
"""

from __future__ import annotations

from ..frameworks.common import ConfigImportError, Imported
from ..frameworks.registry import IMPORT_FORMATS, ImportFormat, import_config
from ..frameworks.yaml import parse_yaml

__all__ = ["IMPORT_FORMATS", "ConfigImportError", "ImportFormat", "Imported", "import_config",
           "parse_yaml"]
