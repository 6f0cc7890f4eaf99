"""oxbench.text.compat reads the renamed names off the installed transformers (CI runs this in both of its
venvs: the newest transformers and the GPU image's 5.17)."""

import inspect

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

from oxbench.text.compat import cache_name


def test_the_cache_name_is_the_installed_models_argument_and_output_field():
    name = cache_name()
    assert name in inspect.signature(Qwen2ForCausalLM.forward).parameters, transformers.__version__
    cfg = Qwen2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=32, vocab_size=20)  # fmt: skip
    out = Qwen2ForCausalLM(cfg)(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    assert out[name] is not None
    assert {"cache", "past_key_values"} - {name} & set(out.keys()) == set()
