"""Model states and sharding against the ZeRO paper's figures."""

import pytest

from calc.architecture import Architecture
from calc.scenario import parse_scenario, resolve
from calc.setup import setup
from calc.states import model_states

# A ~7.5B GPT-like model; the ZeRO paper's Figure 1 uses Psi = 7.5B, N_d = 64, K = 12.
ARCH = Architecture(model_type="gpt2", hidden_size=4096, num_hidden_layers=36,
                    num_attention_heads=32, intermediate_size=16384, vocab_size=51200,
                    max_position_embeddings=2048, tie_word_embeddings=True)


def _states_bytes(zero: int) -> tuple[int, int]:
    x = setup(resolve(parse_scenario({
        "model": ARCH.model_dump(), "training": {"mixed_precision": "master", "precision": "bf16", "seq_len": 1024},
        "parallelism": {"dp": 64, "zero": zero}})))
    ms = model_states(x, x.stages[0])
    total = sum(t.bytes for t in (*ms.parameters, ms.gradients, *ms.optimizer_states))
    return total, ms.local.total


@pytest.mark.parametrize(("zero", "paper_gb", "formula"), [
    (0, 120.0, lambda psi, nd: (2 + 2 + 12) * psi),
    (1, 31.4, lambda psi, nd: 2 * psi + 2 * psi + 12 * psi / nd),
    (2, 16.6, lambda psi, nd: 2 * psi + (2 + 12) * psi / nd),
    (3, 1.9, lambda psi, nd: (2 + 2 + 12) * psi / nd),
])
def test_zero_stages_match_zero_paper(zero, paper_gb, formula) -> None:
    """Rajbhandari et al. 2020, Figure 1: 7.5B params, 64 GPUs, mixed-precision Adam."""
    states, psi = _states_bytes(zero)
    assert states == pytest.approx(formula(psi, 64), rel=1e-6)
    scaled_to_paper = states / psi * 7.5e9 / 1e9
    assert scaled_to_paper == pytest.approx(paper_gb, abs=0.06)


def test_zero3_never_increases_model_states() -> None:
    totals = [_states_bytes(z)[0] for z in range(4)]
    assert totals == sorted(totals, reverse=True)
