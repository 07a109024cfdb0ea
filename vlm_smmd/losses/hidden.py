"""The aux loss beside a fused or chunked cross-entropy: V_num logits from the final hidden states.

A fused CE (Liger's fused linear cross-entropy, TRL's fused LM head, any chunked loss) scores the labels
without building logits [B, T, V]. SMMD and the other aux losses need only the V_num columns at the numeric
answer positions: logits[:, V_num] = h @ W[V_num].T + b[V_num], with h the final hidden states [M, H] at those
positions and W [V, H], b [V] the LM head's weight and bias: [M, N] numbers (N = 10 on Qwen, 1,110 on
Llama-3) instead of [B, T, V]. The head's gradient reaches only its V_num rows from this term.

h is what the head receives. In transformers 5 the decoder's `last_hidden_state` is taken after the final
norm, and with `output_hidden_states=True` the outputs' `hidden_states[-1]` is that same tensor
(`capture_outputs(tie_last_hidden_states=True)`, every language model; Qwen2, Qwen2.5-VL and Llama included),
so no norm is applied here. Families that scale or soft-cap their logits after the head (Gemma 2's
final_logit_softcapping, Cohere's logit_scale) are refused by `lm_head_of` rather than scored wrongly.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                 "logits_scaling")


def lm_head_of(model):
    """The model's LM head module (`get_output_embeddings()`; peft-wrapped models answer it too), or a
    one-line ValueError when the family changes its logits after the head."""
    if not hasattr(model, "get_output_embeddings") or model.get_output_embeddings() is None:
        raise ValueError(f"{type(model).__name__} has no get_output_embeddings(): no LM head to take V_num rows from")
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in SCALED_LOGITS:
        if getattr(text, key, None) not in (None, 1, 1.0):
            raise ValueError(f"{type(model).__name__} sets {key}={getattr(text, key)}: its logits are not the head's "
                             "output, which the hidden-state aux path assumes; build logits (no fused CE) for this family")
    return model.get_output_embeddings()


class _HeadRows(torch.autograd.Function):
    """hidden [M, H] @ weight[ids].T (+ bias[ids]) -> [M, N], whose backward gives the head's weight [V, H] and
    bias [V] a sparse gradient holding their N rows only. The plain path (index_select) builds a dense zero
    [V, H] gradient (1.2 GB on Qwen in fp32) and adds it whole into the CE's; autograd adds a sparse one into
    the CE's dense gradient of the same backward in place, N rows, so `.grad` stays dense as the optimizer and
    DDP/ZeRO hooks expect (only a backward in which nothing else reaches the head would leave it sparse)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, ids):
        rows = weight.index_select(0, ids)  # [N, H]
        bias_rows = None if bias is None else bias.index_select(0, ids)
        ctx.save_for_backward(hidden, rows, ids)
        ctx.shape, ctx.has_bias = weight.shape, bias is not None
        return F.linear(hidden, rows, bias_rows)

    @staticmethod
    def backward(ctx, grad):
        hidden, rows, ids = ctx.saved_tensors
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad.to(rows.dtype) @ rows).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            block = (grad.t().to(hidden.dtype) @ hidden).to(rows.dtype)  # [N, H]
            grad_weight = torch.sparse_coo_tensor(ids[None], block, ctx.shape, check_invariants=False)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = torch.sparse_coo_tensor(ids[None], grad.sum(0).to(rows.dtype), ctx.shape[:1],
                                                check_invariants=False)
        return grad_hidden, grad_weight, grad_bias, None


def numeric_logits(hidden: torch.Tensor, lm_head, numeric_ids: torch.Tensor) -> torch.Tensor:
    """V_num logits [M, N] (float32) from final hidden states [M, H] and the head's rows at numeric_ids [N]:
    the head's own matmul in its dtype on N rows, then upcast, as the logits path upcasts its logits; the
    head's gradient is sparse on those rows (`_HeadRows`)."""
    weight = lm_head.weight
    ids = numeric_ids.to(weight.device)
    logits = _HeadRows.apply(hidden.to(weight.device, weight.dtype), weight, getattr(lm_head, "bias", None), ids)
    return logits.float() if logits.dtype != torch.float64 else logits


def final_hidden_states(outputs) -> torch.Tensor | None:
    """The final (normed) hidden states [B, T, H] of outputs from a forward with output_hidden_states=True
    (`hidden_states[-1]`), else None."""
    hidden = outputs.get("hidden_states") if hasattr(outputs, "get") else getattr(outputs, "hidden_states", None)
    return hidden[-1] if hidden else None


class DecoderOutput:
    """`with DecoderOutput(model) as seen:` keeps the decoder's last_hidden_state [B, T, H] of the forward run
    inside as `seen.hidden`: read from the decoder module (`get_decoder()`) whatever the LM-head forward does
    afterwards (Liger and TRL call the decoder, then score the labels from its output without logits)."""

    def __init__(self, model):
        self.decoder = model.get_decoder()
        self.hidden = None
        self._hook = None

    def _keep(self, module, args, output) -> None:
        self.hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]

    def __enter__(self) -> DecoderOutput:
        self._hook = self.decoder.register_forward_hook(self._keep)
        return self

    def __exit__(self, *exc) -> None:
        self._hook.remove()
