"""An offline tokenizer for the random-weight Llama configs, so that ``vllm serve`` and
``vllm bench serve`` run without a model hub.

Problem
-------
``vllm serve`` needs a tokenizer next to the model's ``config.json`` (the API
server tokenises prompts) and ``vllm bench serve --dataset-name random`` needs
the same tokenizer to draw prompts of an exact token length.  No hub is
reachable here, and the timing configs use random weights, so any tokenizer
with the config's vocabulary size will do, as long as decoding a random token
sequence and encoding it again gives the same number of tokens (otherwise the
prompts' lengths drift from ``--random-input-len``).

Construction
------------
A word-level vocabulary (``tokenizers.models.WordLevel``) of exactly
``vocab_size`` entries: ``<unk>`` (id 0), ``<s>`` (1), ``</s>`` (2) -- the ids of
the Llama configs' pad/bos/eos -- then the words ``w3`` ... ``w{vocab_size-1}``;
a whitespace pre-tokenizer, no normaliser and no post-processor (no special
token is added on encoding), saved through ``transformers.PreTrainedTokenizerFast``
(``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``).
Every id decodes to one word and every word encodes to its id, so
``encode(decode(ids)) == ids`` for ids without special tokens; :func:`round_trip_ok`
checks it on a random sample.

:func:`prepare_model_dir` writes ``config.json`` (from a config in
:mod:`perfmodel.data.configs` or a path) and the tokenizer into one folder, the
``MODEL_DIR`` of ``scripts/collect_vllm_serve.sh``.  Needs the ``vllm`` extra
(``tokenizers``, ``transformers``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from perfmodel.errors import InputError

__all__ = ["build_tokenizer", "prepare_model_dir", "round_trip_ok"]

SPECIAL = ("<unk>", "<s>", "</s>")


def build_tokenizer(vocab_size: int):
    """A ``PreTrainedTokenizerFast`` with ``vocab_size`` word-level tokens (module docstring)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL):
        raise InputError(f"vocab_size must be an integer > {len(SPECIAL)}, got {vocab_size!r}")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<unk>",
                                   model_max_length=1 << 20)


def round_trip_ok(tokenizer, n: int = 2000, length: int = 256, seed: int = 0) -> bool:
    """``encode(decode(ids)) == ids`` for ``n`` random non-special id sequences."""
    import numpy as np

    rng = np.random.default_rng(seed)
    V = len(tokenizer)
    for _ in range(n):
        ids = rng.integers(len(SPECIAL), V, length).tolist()
        text = tokenizer.decode(ids)
        if tokenizer.encode(text, add_special_tokens=False) != ids:
            return False
    return True


def prepare_model_dir(config, out_dir) -> Path:
    """Write ``config.json`` and the offline tokenizer into ``out_dir``; return it.

    Parameters
    ----------
    config : a config name in :mod:`perfmodel.data.configs` (e.g. ``'llama-small'``)
        or a path to a Llama ``config.json``
    out_dir : folder to create (an existing one must hold the same config.json)
    """
    from perfmodel.data.collect.vllm_collector import resolve_model_config

    name, _path, cfg = resolve_model_config(config)
    vocab = cfg.get("vocab_size")
    if not isinstance(vocab, int):
        raise InputError(f"config {name!r} has no integer vocab_size")
    out = Path(out_dir)
    text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    cfg_path = out / "config.json"
    if cfg_path.exists() and cfg_path.read_text() != text:
        raise InputError(f"{cfg_path} exists with another config; give a new folder")
    out.mkdir(parents=True, exist_ok=True)
    tmp = cfg_path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, cfg_path)
    tok = build_tokenizer(vocab)
    if not round_trip_ok(tok, n=200):
        raise InputError("the offline tokenizer does not round-trip token ids")
    tok.save_pretrained(out)
    return out


def main(argv=None) -> int:
    """``python -m perfmodel.data.collect.tokenizer CONFIG OUT_DIR``."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="config name (llama-small, llama-tiny) or config.json path")
    ap.add_argument("out_dir")
    a = ap.parse_args(argv)
    try:
        print(prepare_model_dir(a.config, a.out_dir))
    except InputError as e:
        print(f"error: {e}")
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
