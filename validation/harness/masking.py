"""Padded batches under fake tensors: transformers reads the padding mask's values to decide
whether a layer may skip its mask (`_ignore_causal_mask_sdpa`: no token padded), which a fake
tensor cannot answer. The traced batch is padded by construction, so the answer is no."""
from __future__ import annotations

import transformers.masking_utils as masking_utils

_ORIGINAL = masking_utils._ignore_causal_mask_sdpa


def _padded(padding_mask, *args, **kwargs) -> bool:
    if padding_mask is not None:
        return False  # a padded batch: the mask cannot be skipped
    return _ORIGINAL(padding_mask, *args, **kwargs)


def pad() -> None:
    """Trace the next steps as padded: no layer skips its mask."""
    masking_utils._ignore_causal_mask_sdpa = _padded
