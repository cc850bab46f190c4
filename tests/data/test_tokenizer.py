"""The offline tokenizer: exact vocabulary, round trip, model folder (needs the `vllm` extra)."""
import importlib.util
import json

import pytest

from perfmodel.errors import InputError

HAVE = all(importlib.util.find_spec(m) is not None for m in ("tokenizers", "transformers"))
needs = pytest.mark.skipif(not HAVE, reason="tokenizers/transformers not installed (extra "
                                            "perfmodel[vllm])")


def test_bad_vocab_size_is_refused_before_any_import():
    from perfmodel.data.collect.tokenizer import build_tokenizer

    with pytest.raises(InputError, match="vocab_size"):
        build_tokenizer(3)
    with pytest.raises(InputError, match="vocab_size"):
        build_tokenizer(True)


@needs
def test_vocabulary_round_trip_and_no_added_tokens():
    from perfmodel.data.collect.tokenizer import build_tokenizer, round_trip_ok

    tok = build_tokenizer(1000)
    assert len(tok) == 1000
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.encode("w3 w999") == [3, 999]  # no special token added
    assert round_trip_ok(tok, n=50, length=64)


@needs
def test_model_dir_holds_config_and_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from perfmodel.data.collect.tokenizer import prepare_model_dir

    out = prepare_model_dir("llama-tiny", tmp_path / "m")
    cfg = json.loads((out / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == cfg["vocab_size"] == 32000
    assert prepare_model_dir("llama-tiny", out) == out  # same config: idempotent
    (out / "config.json").write_text("{}")
    with pytest.raises(InputError, match="another config"):
        prepare_model_dir("llama-tiny", out)
