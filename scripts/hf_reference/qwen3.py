"""Tiny random Qwen3 and Qwen2 models from transformers' own classes, the reference for cellm's qwen arch.
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/qwen3.py
"""
import torch
import transformers

from common import randomize, save_reference

SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6)

torch.manual_seed(0)
qwen3 = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
    **SHAPE, head_dim=24, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
randomize(qwen3, seed=3)
save_reference(qwen3, "qwen3-tiny", note="head_dim 24 differs from hidden/heads; untied output")

qwen2 = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
    **SHAPE, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}))
randomize(qwen2, seed=2)
save_reference(qwen2, "qwen2-tiny", note="Q/K/V biases; tied output")
