"""Number-level losses: they score whole numbers, so they need the `NumberLayout` of the answer positions.

How a number's loss enters the objective: every numeric token of a number carries that number's loss (NTIL
adds its own token term), so the objective's aux sum runs over numeric tokens like every other aux loss and
is divided by the same count of numeric tokens. The aux is then the numeric-token-weighted mean of the number
losses; a number lies in one row of one micro-batch, so sums over micro-batches stay exact under gradient
accumulation and data parallelism.

Place values: token t of a number contributes v_t * 10**e_t (`NumberLayout.exponent`); for Qwen's digits
that is digit times place. With multi-digit tokens (Llama-3) the predicted token takes the target token's
place, so the predicted number is read on the target's layout.
"""

from __future__ import annotations

import torch

from .base import NumericLoss


def _number_sums(numbers, per_position: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Each number's sum of per_position * scale: [M], [M] -> [K], summed in a fixed order on every device."""
    return numbers.dense(per_position * scale).sum(1)


def _at_positions(numbers, per_number: torch.Tensor, outside=0) -> torch.Tensor:
    """[K] -> [M]: each position gets its number's entry, `outside` where it is in no number."""
    padded = torch.cat([per_number, per_number.new_full((1,), outside)])
    return padded[torch.where(numbers.number >= 0, numbers.number, numbers.count)]


class NumberLevelLoss(NumericLoss):
    """The value of the whole predicted number against the target number's value.

    For number k with positions t (place exponents e_t), p_t = softmax over V_num:
        y_hat_k = sum_t E_{p_t}[v] * 10**e_t      y_k = sum_t v_{y_t} * 10**e_t
        loss_k  = |y_hat_k - y_k| / (|y_hat_k| + |y_k|)      (symmetric relative error, in [0, 1]; 0 / 0 = 0)
    The idea of ntloss's NumberLevelLoss (Zausinger et al., "Regress, Don't Guess", ICML 2025) with decimals
    read at their place; without its reweighing by the mass on number tokens (p is renormalised over V_num,
    as for every loss here). The relative error does not change when both numbers are scaled, so each number
    is summed relative to its leading place (no overflow for long digit strings).
    """

    needs_numbers = True

    def _per_position(self, logits, target, numbers):
        v = self.values.to(device=logits.device, dtype=logits.dtype)
        expected = torch.softmax(logits, -1) @ v  # [M]
        exponent = numbers.exponent
        lowest = torch.iinfo(exponent.dtype).min
        lead = numbers.dense(exponent, fill=lowest).amax(1) if numbers.count else exponent[:0]  # leading places
        scale = torch.pow(10.0, (exponent - _at_positions(numbers, lead)).to(logits.dtype))  # <= 1 in numbers
        predicted, wanted = _number_sums(numbers, expected, scale), _number_sums(numbers, v[target], scale)
        loss = (predicted - wanted).abs() / (predicted.abs() + wanted.abs()).clamp_min(torch.finfo(logits.dtype).tiny)
        return _at_positions(numbers, loss)


class NTILLoss(NumericLoss):
    """NTIL, the Numerical Token Integrity Loss (Fei et al., "Advancing Sequential Numerical Prediction in
    Autoregressive Models", ACL 2025, arXiv 2505.13077), from the paper's and its code release's description.

    Token level, for each numeric position t with digits_after d_t (the place weight) and p_t over V_num:
        token_t = digit_alpha * digit_exp**d_t * EMD(p_t, onehot(y_t)),  EMD = sum_i p_i |v_i - v_{y_t}|
    (the Earth Mover's Distance on the value line; on Qwen's digits the paper's digit EMD). Sequence level,
    per number k read from each position's predicted token (x_hat_k) and from the targets (x_k):
        abs_k = |x_hat_k - x_k| / (max(x_hat_k, x_k) + 1)     mag_k = log((max + 1) / (min + 1))
    and each numeric position carries token_t + abs_alpha * abs_k + mag_alpha * mag_k (module docstring).

    Choices where the paper leaves room or the release differs from our setting:
    - x_hat reads each position's argmax token, with a straight-through gradient of softmax(z / temperature)
      (the release's hard Gumbel-softmax at tau 0.1, without its random noise: same seed, same bytes).
    - A decimal point inside a number keeps it one number at its true place ("3.015" is 3.015, and "3" has
      3 digits after it); the release splits "3.015" into the integers 3 and 15.
    - Means over the optimizer step's numeric tokens instead of per-sample means, and lambda is the plain
      weight of the aux (the release rescales the loss by CE / NTIL, detached).
    - Place values and place weights beyond 10**30 (10**300 for float64 logits) are capped, so long digit
      strings stay finite.
    Defaults are the release's: digit_exp 1.2, digit_alpha 1, abs_alpha 0.2, mag_alpha 0.2, temperature 0.1.
    """

    needs_numbers = True

    def __init__(self, values, *, digit_exp: float = 1.2, digit_alpha: float = 1.0, abs_alpha: float = 0.2,
                 mag_alpha: float = 0.2, temperature: float = 0.1):
        super().__init__(values)
        if digit_exp <= 0 or temperature <= 0:
            raise ValueError(f"digit_exp and temperature must be positive, got {digit_exp} and {temperature}")
        self.digit_exp, self.digit_alpha, self.abs_alpha, self.mag_alpha = digit_exp, digit_alpha, abs_alpha, mag_alpha
        self.temperature = temperature

    def _per_position(self, logits, target, numbers):
        v = self.values.to(device=logits.device, dtype=logits.dtype)
        probs = torch.softmax(logits, -1)
        emd = (probs * (v[None, :] - v[target][:, None]).abs()).sum(-1)  # [M]
        cap = 300 if logits.dtype == torch.float64 else 30
        weight = torch.pow(self.digit_exp, numbers.digits_after.to(logits.dtype)).clamp_max(10.0**cap)
        soft = torch.softmax(logits / self.temperature, -1) @ v
        predicted_token = soft + (v[logits.argmax(-1)] - soft).detach()  # argmax value, soft gradient
        scale = torch.pow(10.0, numbers.exponent.clamp(-cap, cap).to(logits.dtype))
        predicted, wanted = _number_sums(numbers, predicted_token, scale), _number_sums(numbers, v[target], scale)
        high, low = torch.maximum(predicted, wanted), torch.minimum(predicted, wanted)
        relative = (predicted - wanted).abs() / (high + 1)
        magnitude = torch.log1p(high) - torch.log1p(low)
        token = torch.where(numbers.number >= 0, self.digit_alpha * weight * emd, 0.0)
        return token + _at_positions(numbers, self.abs_alpha * relative + self.mag_alpha * magnitude)
