"""The decoder's dimensions: :class:`LlamaConfig` and :func:`load_config` (no torch needed).

See :mod:`perfmodel.data.collect_torch.harness`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from perfmodel._io import read_parsed
from perfmodel.errors import InputError


# --------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Dimensions of a Llama-style decoder (names as in Hugging Face ``config.json``)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 32768
    description: str = ""

    def __post_init__(self):
        ints = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings"]
        bad = [f"{k}={getattr(self, k)!r}" for k in ints
               if not isinstance(getattr(self, k), int) or getattr(self, k) < 1]
        if bad:
            raise InputError(f"LlamaConfig: fields must be positive integers: {', '.join(bad)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InputError(
                f"LlamaConfig: num_attention_heads={self.num_attention_heads} is not a multiple "
                f"of num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            raise InputError(f"LlamaConfig: head_dim={self.head_dim} must be even (rotary)")
        if not (self.rope_theta > 0 and self.rms_norm_eps > 0):
            raise InputError(f"LlamaConfig: rope_theta={self.rope_theta} and "
                             f"rms_norm_eps={self.rms_norm_eps} must be > 0")

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    def n_params(self) -> int:
        """Number of weights (embedding and LM head included)."""
        h, hd = self.hidden_size, self.head_dim
        qkv = h * (self.num_attention_heads + 2 * self.num_key_value_heads) * hd
        layer = qkv + self.num_attention_heads * hd * h + 3 * h * self.intermediate_size + 2 * h
        return self.num_hidden_layers * layer + 2 * self.vocab_size * h + h

    @classmethod
    def from_dict(cls, d: dict) -> LlamaConfig:
        """Build from a dict, rejecting unknown keys (one message lists them)."""
        if not isinstance(d, dict):
            raise InputError(f"LlamaConfig.from_dict: expected a dict, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.default is dataclasses.MISSING and f.name not in d)
        if unknown or missing:
            raise InputError(f"LlamaConfig: unknown keys {unknown}, missing keys {missing}")
        return cls(**d)


def load_config(path: str | os.PathLike) -> LlamaConfig:
    """Read a :class:`LlamaConfig` from a JSON file (e.g. ``perfmodel/data/configs/llama-gpu-*.json``)."""
    p = str(Path(path))
    d = read_parsed(p, json.loads, json.JSONDecodeError,
                    missing=f"load_config: path={p!r} is not a file",
                    invalid=f"load_config: {p!r} is not valid JSON")
    return LlamaConfig.from_dict(d)
