"""Numeric-token losses (pure tensor math): SMMD, its baselines, and the answer-only objective."""

from .baselines import DIST2Loss, GaussianCELoss, NTLMSELoss, NTLWASLoss
from .kernels import build_kernel
from .objective import AUX_NAMES, NumericObjective, answer_positions
from .smmd import SMMDLoss

__all__ = [
    "AUX_NAMES", "DIST2Loss", "GaussianCELoss", "NTLMSELoss", "NTLWASLoss", "NumericObjective", "SMMDLoss",
    "answer_positions", "build_kernel",
]
