"""Model states and sharding against the ZeRO paper's figures."""

import pytest

from calc.architecture import Architecture
from calc.scenario import parse_scenario, resolve
from calc.setup import setup
from calc.states import DS_PERSISTENT, deepspeed_partition, heaviest_share, model_states

# A ~7.5B GPT-like model; the ZeRO paper's Figure 1 uses Psi = 7.5B, N_d = 64, K = 12.
ARCH = Architecture(model_type="gpt2", hidden_size=4096, num_hidden_layers=36,
                    num_attention_heads=32, intermediate_size=16384, vocab_size=51200,
                    max_position_embeddings=2048, tie_word_embeddings=True)


def _states_bytes(zero: int) -> tuple[int, int, int]:
    """(model states, parameters, the elements of rank 0's gradient partition under DeepSpeed)."""
    x = setup(resolve(parse_scenario({
        "model": ARCH.model_dump(), "training": {"mixed_precision": "master", "precision": "bf16", "seq_len": 1024},
        "parallelism": {"dp": 64, "zero": zero}})))
    ms = model_states(x, x.stages[0])
    # DeepSpeed's stage 3 keeps its gradient partitions all step (`resident`, beside its reduce
    # bucket), and its norms and biases whole (`DS_PERSISTENT`): neither is in the paper
    kept = (t for t in ms.resident if t.key.startswith("gradients/"))
    total = sum(t.bytes for t in (*ms.parameters, ms.gradients, *kept, *ms.optimizer_states)
                if t.formula is not DS_PERSISTENT)
    return total, ms.local.total, deepspeed_partition(ms.local.ordered, 64)[1]


@pytest.mark.parametrize(("zero", "paper_gb", "formula"), [
    (0, 120.0, lambda psi, nd, held: (2 + 2 + 12) * psi),
    (1, 31.4, lambda psi, nd, held: 2 * psi + 2 * psi + 12 * psi / nd),
    (2, 16.6, lambda psi, nd, held: 2 * psi + 2 * held + 12 * psi / nd),
    (3, 1.9, lambda psi, nd, held: (2 + 2 + 12) * psi / nd),
])
def test_zero_stages_match_zero_paper(zero, paper_gb, formula) -> None:
    """Rajbhandari et al. 2020, Figure 1: 7.5B params, 64 GPUs, mixed-precision Adam. At stage
    2 DeepSpeed's rank 0 keeps the gradients of the tensors its 1/N touches, whole (traced):
    here the whole token embedding, where the paper splits 2 Psi evenly."""
    states, psi, held = _states_bytes(zero)
    assert states == pytest.approx(formula(psi, 64, held), rel=1e-6)
    even = formula(psi, 64, psi / 64)
    assert even / psi * 7.5e9 / 1e9 == pytest.approx(paper_gb, abs=0.06)
    if zero == 2:
        assert held == ARCH.vocab_size * ARCH.hidden_size > psi / 64  # the token embedding


def test_zero3_never_increases_model_states() -> None:
    totals = [_states_bytes(z)[0] for z in range(4)]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize("zero", [1, 2])
def test_deepspeed_torch_autocast_keeps_fp32_parameters_and_clones_its_partition(zero) -> None:
    """DeepSpeed's ZeRO-1/2 under torch_autocast (stage_1_and_2.py): the parameters stay fp32
    and whole on every GPU; the optimizer clones its 1/N partition into fp32 beside them
    (single_partition_of_fp32_groups) with Adam's two moments; stage 2 keeps the fp32
    gradients of the tensors its 1/N touches (ZeRO-1 every gradient, that partition added at the
    end of backward); one reduce bucket per communication dtype (nn.Linear's bf16, the rest fp32),
    each reduce_bucket_size elements in the parameters' fp32. By hand: 4 + 4 Psi / N +
    8 Psi / N (+ 4 G_p at stage 2, else 4 Psi)."""
    def states(framework: str | None) -> tuple:
        x = setup(resolve(parse_scenario({
            "model": ARCH.model_dump(), "training": {"seq_len": 1024},
            "parallelism": {"dp": 64, "zero": zero, "framework": framework}})))
        return x, model_states(x, x.stages[0])

    x, ms = states("deepspeed")
    psi, n = ms.local.total, 64
    parameters = sum(t.bytes for t in ms.parameters)
    optimizer = sum(t.bytes for t in ms.optimizer_states)
    assert parameters == 4 * psi
    assert optimizer == pytest.approx((4 + 8) * psi / n, abs=3 * 4)  # clone + 2 moments
    held = deepspeed_partition(ms.local.ordered, n)[1]
    assert held == ms.local.ordered[0]  # wider than 1/64 of the model: the embedding alone
    assert ms.gradients.bytes == 4 * (held if zero == 2 else psi)
    if zero == 1:  # allocated at the end of backward, beside every gradient
        assert ms.partition_copy is not None and ms.partition_copy.bytes == 4 * held
    else:
        assert ms.partition_copy is None
    assert ms.reduce_bucket is not None and ms.ddp_buckets is None
    assert ms.reduce_bucket.bytes == 2 * 4096**2 * 4
    assert ms.gathered is None and ms.gathered_model is None  # no FSDP2
    assert x.n.weight_copies  # autocast's bf16 weight cache, as torch's amp

    _, torch_form = states(None)  # amp names no framework: torch's forms
    torch_states = sum(t.bytes for t in torch_form.optimizer_states)
    if zero == 2:  # FSDP2: an even 1/N
        assert torch_states == pytest.approx(8 * psi / n, abs=8)
    else:  # ZeroRedundancyOptimizer: whole tensors, so a rank holds the embedding at least
        assert torch_states == 8 * heaviest_share(torch_form.local.tensors, n)
        assert torch_states >= 8 * max(torch_form.local.tensors) > 8 * psi / n
    assert torch_form.reduce_bucket is None


def test_deepspeed_torch_autocast_buckets_lora_s_adapters_once() -> None:
    """DeepSpeed makes one reduce bucket per communication dtype among the trainable
    parameters (stage_1_and_2.py get_all_comm_dtypes over bit16_groups): LoRA's adapters are
    all nn.Linear, so torch_autocast gives them the one low-precision bucket, in the adapters'
    fp32 (traced: a random run, LoRA on q and v under ZeRO-2, 64 MiB at a 4096 width, where
    two were counted)."""
    def bucket(finetuning: str) -> int:
        x = setup(resolve(parse_scenario({
            "model": ARCH.model_dump(), "training": {"seq_len": 1024, "finetuning": finetuning,
                                                    "mixed_precision": "amp"},
            "parallelism": {"dp": 2, "zero": 2, "framework": "deepspeed"}})))
        ms = model_states(x, x.stages[0])
        assert ms.reduce_bucket is not None
        return ms.reduce_bucket.bytes
    assert bucket("lora") == 4096**2 * 4
    assert bucket("full") == 2 * 4096**2 * 4



@pytest.mark.parametrize(("finetuning", "widths"), [("lora", (2,)), ("qlora", (2,)),
                                                     ("full", (2, 4))])
def test_deepspeed_zero3_buckets_in_each_communication_dtype(finetuning, widths) -> None:
    """Stage 3 allocates each reduce bucket in its communication dtype (stage3.py ipg_buckets),
    not in the parameters' as stages 1 and 2 do: under torch_autocast nn.Linear's gradients
    travel in bf16, the rest in fp32. LoRA's adapters are all nn.Linear: one bf16 bucket;
    full training adds the norms' and the embedding's fp32 one (traced: 32 MiB of gradient
    buffer on LoRA and QLoRA at a 4096 width, 96 MiB on full training)."""
    x = setup(resolve(parse_scenario({
        "model": ARCH.model_dump(), "training": {"seq_len": 1024, "finetuning": finetuning,
                                                "mixed_precision": "amp"},
        "parallelism": {"dp": 2, "zero": 3, "framework": "deepspeed"}})))
    buckets = [t for t in model_states(x, x.stages[0]).resident
               if t.key == "temporaries/grad_buckets"]
    assert [t.bytes for t in buckets] == [4096**2 * w for w in widths]


def test_deepspeed_zero3_buckets_peft_s_expert_adapters_in_fp32() -> None:
    """peft's ParamWrapper keeps the routed experts' factors as its own parameters, not an
    nn.Linear's: torch_autocast leaves them fp32, a bucket of their own beside the bf16 one of
    the attention's adapters."""
    mixtral = Architecture(model_type="mixtral", hidden_size=1024, num_hidden_layers=2,
                           num_attention_heads=8, num_key_value_heads=2, intermediate_size=2048,
                           vocab_size=32000, num_local_experts=4, num_experts_per_tok=2)
    def widths(targets: str) -> list[int]:
        x = setup(resolve(parse_scenario({
            "model": mixtral.model_dump(), "training": {
                "seq_len": 1024, "finetuning": "lora", "lora_targets": targets,
                "mixed_precision": "amp"},
            "parallelism": {"dp": 2, "zero": 3, "framework": "deepspeed"}})))
        return [t.bytes // 1024**2 for t in model_states(x, x.stages[0]).resident
                if t.key == "temporaries/grad_buckets"]
    assert widths("all_linear") == [2, 4]
    assert widths("attention") == [2]

def test_deepspeed_partition_counts_the_tensors_rank_0_touches_whole() -> None:
    """stage_1_and_2.py pads the flat parameters to a multiple of 2N and gives each rank an
    equal share; copy_grads_in_partition sizes its buffer by the tensors in the share, whole.
    By hand: 10 + 7 + 5 + 3 = 25 elements over N = 2 is a share of 14 (25 -> 28 / 2): the
    tensors of 10 and 7 (the 7 cut at 4), largest piece 10, two tensors."""
    assert deepspeed_partition((10, 7, 5, 3), 2) == (14, 17, 10, 2)
    assert deepspeed_partition((10, 7, 5, 3), 1) == (26, 25, 10, 4)  # padded to 26: all of it
    assert deepspeed_partition((30, 7), 4) == (10, 30, 10, 1)  # the first tensor alone, cut


def test_deepspeed_step_holds_the_partition_and_its_fp64_norm() -> None:
    """DeepSpeed 0.19.8's ZeRO-2 step with bf16 gradients (traced): the partition buffer, the
    norm of each piece in fp64 (get_norm_dtype), the flattened partition and its fp32 copy;
    the reduce buckets are released by then. One piece (the embedding): max(8 x piece, 4 P_s)."""
    x = setup(resolve(parse_scenario({
        "model": ARCH.model_dump(), "training": {"seq_len": 1024, "mixed_precision": "master"},
        "parallelism": {"dp": 64, "zero": 2}})))
    ms = model_states(x, x.stages[0])
    share, held, largest, pieces = deepspeed_partition(ms.local.ordered, 64)
    assert pieces == 1 and largest == share
    assert ms.step_gradients.bytes == 2 * held
    assert ms.step_temporary is not None and ms.step_temporary.bytes == 8 * share


def test_zero_redundancy_optimizer_gives_whole_tensors_to_the_least_loaded_rank() -> None:
    """torch's greedy partition, largest first (ZeroRedundancyOptimizer._partition_parameters):
    [5, 4, 3, 3, 1] over 2 ranks -> {5, 3} and {4, 3, 1}: the heaviest holds 8."""
    assert heaviest_share((5, 4, 3, 3, 1), 2) == 8
    assert heaviest_share((10, 1, 1), 4) == 10
    assert heaviest_share((), 3) == 0


def test_zero1_traced_probe_with_a_large_tied_embedding() -> None:
    """qwen2.5-0.5b, dp 8: the 136M-element tied embedding alone is more than an eighth of the
    model, so the traced rank 0 holds its Adam states, 1039 MiB against an even 471 MiB."""
    x = setup(resolve(parse_scenario({
        "model": "qwen2.5-0.5b", "training": {"seq_len": 2048, "micro_batch_size": 2},
        "parallelism": {"dp": 8, "zero": 1}})))
    ms = model_states(x, x.stages[0])
    states = sum(t.bytes for t in ms.optimizer_states)
    assert states == 8 * 151936 * 896  # the embedding's two fp32 moments (traced: 1039 MiB)
