"""The model a traced step trains: built from its config on the fake device, with LoRA or a
QLoRA-shaped 4-bit base, and activation checkpointing as Trainer, torchtitan or Megatron apply it.
"""
from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from .common import Untraceable

# bitsandbytes NF4 with double quantisation (BitsAndBytesConfig(load_in_4bit=True,
# bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)), as `quantize_4bit` allocates it:
# the packed weight, two 4-bit values a byte; one 8-bit absmax per block of 64; for the nested
# state, one fp32 absmax per 256 blocks and its 256-entry fp32 code; the 16-entry NF4 code.
NF4_BLOCK = 64
NESTED_BLOCK = 256


def build(cfg, attn_impl: str, tr: dict, dev: torch.device, dtype: torch.dtype,
          compute: torch.dtype, storage: torch.dtype = torch.uint8) -> nn.Module:
    """The model in `dtype` on `dev` (random init under FakeTensorMode), LoRA applied; QLoRA's
    4-bit layers compute in `compute` (bnb_4bit_compute_dtype) and pack their weight in
    `storage` (bnb_4bit_quant_storage)."""
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_impl,
                                                     dtype=dtype)
    finally:
        torch.set_default_dtype(prev)
    if tr["finetuning"] == "qlora":
        quantize_linears(model, compute, storage)
    if tr["finetuning"] in ("lora", "qlora"):
        model = _peft(model, tr, dev)
    elif tr["finetuning"] != "full":
        raise Untraceable(f"finetuning={tr['finetuning']}")
    return model


def _peft(model: nn.Module, tr: dict, dev: torch.device) -> nn.Module:
    from peft import LoraConfig, get_peft_model
    r = int(tr["lora_rank"])
    if tr["lora_targets"] == "all_linear":
        targets = "all-linear"   # peft: every Linear/Conv1D except the output layer
    elif tr["lora_targets"] == "attention":
        targets = _attention_targets(model)
    elif tr["lora_targets"] == "query_value":
        targets = _query_value_targets(model)
    else:
        raise Untraceable(f"lora_targets={tr['lora_targets']}")
    lcfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=float(tr["lora_dropout"]),
                      target_modules=targets, task_type="CAUSAL_LM")
    lcfg._register_custom_module({Linear4bit: _lora_linear4bit_class()})
    with torch.device(dev), _fake_safe_module_to():
        model = get_peft_model(model, lcfg)
    return model


# ----------------------------------------------------------------------------- QLoRA layout
class Linear4bit(nn.Linear):
    """A frozen linear layer stored as bitsandbytes stores an NF4 double-quantised weight.

    The NF4 kernels need CUDA, so this reproduces the layout and the traffic, not the values:
    the same tensors of the same sizes and dtypes as `Params4bit` + `QuantState`, and in
    forward and backward what `bnb.nn.Linear4bit` and `MatMul4Bit` do for a training-sized
    input: cast the input to the compute dtype, dequantise the whole weight to it (the fused
    gemm_4bit kernel only serves at most 1536 rows), F.linear / matmul, cast the output back to
    the input's dtype. The layer saves no activation: the weight gets no gradient, and the
    input gradient needs only the packed weight.
    """

    def __init__(self, linear: nn.Module, compute: torch.dtype,
                 storage: torch.dtype = torch.uint8):
        nn.Module.__init__(self)
        if isinstance(linear, nn.Linear):
            self.in_features, self.out_features = linear.in_features, linear.out_features
        else:  # transformers' Conv1D (GPT-2), weight (in, out), transposed for quantisation
            self.in_features, self.out_features = linear.weight.shape
        self.compute_dtype = compute
        n = self.in_features * self.out_features
        blocks = -(-n // NF4_BLOCK)
        dev = linear.weight.device
        # the packed nibbles, two per byte, in `storage`'s elements (bitsandbytes'
        # quant_storage: uint8 by default; the compute dtype where FSDP or DeepSpeed's ZeRO-3
        # partitions the weight beside the others, as transformers' recipe for them sets it)
        per = 2 * storage.itemsize
        self.weight = nn.Parameter(torch.empty(((n + per - 1) // per, 1), dtype=storage,
                                               device=dev), requires_grad=False)
        # QuantState's tensors are plain attributes in bitsandbytes, not parameters or
        # buffers; buffers here, so that the tracker counts them with the model.
        self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=dev))
        self.register_buffer("nested_absmax", torch.empty(-(-blocks // NESTED_BLOCK),
                                                          dtype=torch.float32, device=dev))
        self.register_buffer("nested_code", torch.empty(256, dtype=torch.float32, device=dev))
        self.register_buffer("code", torch.empty(16, dtype=torch.float32, device=dev))
        self.bias = None if linear.bias is None else nn.Parameter(
            linear.bias.detach().to(compute), requires_grad=False)

    def dequantize(self) -> torch.Tensor:
        """dequantize_4bit: the fp32 absmax first (from the nested state), then the weight."""
        absmax = torch.empty(self.absmax.numel(), dtype=torch.float32, device=self.absmax.device)
        weight = torch.empty((self.out_features, self.in_features), dtype=self.compute_dtype,
                             device=self.weight.device)
        del absmax
        return weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _MatMul4Bit.apply(x.to(self.compute_dtype), self).to(x.dtype)


class _MatMul4Bit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, layer):
        # bitsandbytes' MatMul4Bit: the bias goes into the one F.linear (addmm on a contiguous
        # 3-D input), not added after it (which per-op selective checkpointing would see as an
        # mm to count and an add)
        ctx.layer = layer
        return nn.functional.linear(x, layer.dequantize(), layer.bias)

    @staticmethod
    def backward(ctx, grad):
        return torch.matmul(grad, ctx.layer.dequantize().to(grad.dtype)), None


@functools.cache
def _lora_linear4bit_class():
    """peft's LoRA layer for a bitsandbytes 4-bit base (peft/tuners/lora/bnb.py, Linear4bit):
    the base output is cloned, and under autocast the input goes to the adapters as it is
    (without autocast it is cast to the adapters' fp32 and the result back)."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    class LoraLinear4bit(LoraLinear):
        def forward(self, x, *args, **kwargs):
            result = self.base_layer(x, *args, **kwargs).clone()
            for name in self.active_adapters:
                if name not in self.lora_A:
                    continue
                lora_A, lora_B = self.lora_A[name], self.lora_B[name]
                convert = not torch.is_autocast_enabled()
                if convert:
                    expected = result.dtype
                    x = self._cast_input_dtype(x, lora_A.weight.dtype)
                output = lora_B(lora_A(self.lora_dropout[name](x))) * self.scaling[name]
                if convert:
                    output = output.to(expected)
                result = result + output
            return result
    return LoraLinear4bit


def quantize_linears(model: nn.Module, compute: torch.dtype,
                     storage: torch.dtype = torch.uint8) -> None:
    """Replace every nn.Linear and transformers' Conv1D but the output head by its 4-bit
    layout (what `BitsAndBytesConfig(load_in_4bit=True)` does, `replace_with_bnb_linear`: the
    head stays in the model's dtype)."""
    from transformers.pytorch_utils import Conv1D
    head = model.get_output_embeddings()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.Linear, Conv1D)) and child is not head:
                setattr(parent, name, Linear4bit(child, compute, storage))


# ----------------------------------------------------------------------------- checkpointing
def apply_checkpointing(model: nn.Module, tr: dict) -> None:
    """Trainer's `activation_checkpointing_enable()` (non-reentrant checkpoint around each
    decoder layer's `__call__`): `full` on every layer, on every Nth (`checkpoint_every`,
    transformers' `every_n_layers`: layers 0, N, 2N...), or on the first k (`recompute_layers`,
    Megatron's block method); `selective` with the `ops` policy is torchtitan's per-op selective
    checkpointing (save matmul and attention outputs, but every second matmul; early_stop off)."""
    mode, policy = tr["activation_checkpointing"], tr.get("selective_policy") or "ops"
    if mode == "none":
        return
    kwargs = {"use_reentrant": False}
    if mode == "selective":
        if policy != "ops":
            raise Untraceable(f"selective_policy={policy} (Megatron's attention recompute)")
        kwargs.update(context_fn=_sac_context, early_stop=False)
    every = int(tr.get("checkpoint_every") or 1)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs,
                                          every_n_layers=every)
    if tr.get("recompute_layers") is not None:
        for i, layer in enumerate(decoder_layers(model)):
            layer.gradient_checkpointing = i < int(tr["recompute_layers"])


def _sac_context():
    """torchtitan's SelectiveAC policy (torchtitan/distributed/activation_checkpoint.py): save
    the outputs of compute-intensive ops (functorch's default op list: mm, bmm, addmm, the SDPA
    kernels...), of aten.max and of linear; but recompute every second mm/linear."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    save, mm_ops = _sac_save_ops()
    count = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in mm_ops:
            count[mode] += 1
        if func in save:
            if func in mm_ops and count[mode] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


@functools.cache
def _sac_save_ops():
    from torch._functorch.partitioners import get_default_op_list
    aten = torch.ops.aten
    save = {op.default for op in get_default_op_list().compute_intensive_ops}
    save |= {aten._scaled_dot_product_cudnn_attention.default,
             aten._scaled_dot_product_attention_math.default, aten.max.default,
             aten.linear.default, aten.topk.default}
    return frozenset(save), frozenset({aten.mm.default, aten.linear.default})


# ----------------------------------------------------------------------------- structure
@contextlib.contextmanager
def _fake_safe_module_to():
    """nn.Module.to() on FakeTensor params always goes through swap_tensors, which fails
    (FakeTensorMode holds weakrefs). PEFT moves each new adapter to the base layer's
    device/dtype with .to(); do the same by re-registering new Parameters."""
    orig = torch.nn.Module.to

    def to(self, *args, **kwargs):
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)

        def moved(t):
            """`t` on the target device/dtype, or None when it is there already."""
            tdt = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
            tdev = device if device is not None else t.device
            return None if (t.dtype == tdt and t.device == tdev) else t.detach().to(
                device=tdev, dtype=tdt)

        for mod in self.modules():
            for name, p in list(mod._parameters.items()):
                new = None if p is None else moved(p)
                if new is not None:
                    mod._parameters[name] = torch.nn.Parameter(new, requires_grad=p.requires_grad)
            for name, b in list(mod._buffers.items()):
                new = None if b is None else moved(b)
                if new is not None:
                    mod._buffers[name] = new
        return self

    torch.nn.Module.to = to
    try:
        yield
    finally:
        torch.nn.Module.to = orig


def _query_value_targets(model):
    """peft's default for Llama-family models (q_proj and v_proj), the fused qkv projection
    where the model has one (Phi-3's qkv_proj, GPT-2's c_attn): calc's `query_value`. peft's
    own default (`target_modules=None`) is the same where its table has the model type and
    refuses the rest (Phi-3, the MoE families)."""
    leaves = {n.split(".")[-1] for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"}
    targets = sorted(leaves & {"q_proj", "v_proj", "qkv_proj", "c_attn"})
    if not targets:
        raise Untraceable("lora_targets=query_value: the model has no q/v projection")
    return targets


def _attention_targets(model):
    names = set()
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D":
            leaf = n.split(".")[-1]
            if leaf in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "c_attn", "c_proj") \
                    and ".attn" in n or ".self_attn" in n:
                names.add(leaf)
    # gpt2: c_attn/c_proj inside .attn (mlp.c_proj excluded via regex below)
    if "c_attn" in names:
        return r".*\.attn\.(c_attn|c_proj)$"
    return sorted(names)


def decoder_layers(model):
    base = model
    for _ in range(4):
        for attr in ("layers", "h"):
            if hasattr(base, attr) and isinstance(getattr(base, attr), torch.nn.ModuleList):
                return list(getattr(base, attr))
        for attr in ("base_model", "model", "transformer"):
            if hasattr(base, attr):
                base = getattr(base, attr)
                break
    raise RuntimeError("decoder layers not found")
