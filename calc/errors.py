"""The one shape of a bad-input error: `field` names the input, `message` states the rule.

Each stage subclasses it (a config.json key, a scenario field, a planning request, an export
setting), so the library, the CLI (`calc: error: field: message`, exit code 2) and the page
(the message beside the field) report all of them the same way. :class:`PlanError` lives here
rather than in `calc.plan` because the framework import (`calc.frameworks`), a layer below the
planning tools, raises it too.
"""

from __future__ import annotations


class FieldError(ValueError):
    """Bad input: `field` is the dotted path (`training.seq_len`), `message` the rule broken."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PlanError(FieldError):
    """A planning request that cannot be answered: `field` names the input, `message` the rule."""
