"""perfmodel: explain and predict the step latency of LLM serving engines."""
from __future__ import annotations

__version__ = "0.1.0"
