"""Tiny random Gemma 4 text models from transformers' own Gemma4ForCausalLM, the reference for cellm's gemma4 arch.
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/gemma4.py

Gemma 4's norms multiply by their stored w (not 1 + w as Gemma 3's), so randomize's default gains fit.
"""
import json

import torch
import transformers

from common import randomize, save_reference

# Every layer_scalar is a buffer (not a parameter) that randomize leaves at 1; draw it too so the test sees it.
def randomize_layer_scalars(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.layer_scalar.copy_(0.7 + 0.6 * torch.rand(1, generator=gen))


def build(seed, **config):
    model = transformers.Gemma4ForCausalLM(transformers.Gemma4TextConfig(**config))
    randomize(model, seed=seed)
    randomize_layer_scalars(model, seed + 100)
    return model


COMMON = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_attention_heads=4, max_position_embeddings=256,
              rms_norm_eps=1e-6, sliding_window=8, hidden_activation="gelu_pytorch_tanh")

torch.manual_seed(0)
# The E2B/E4B shape in small: per-layer embeddings, the last two layers reading the KV of earlier ones, double-wide
# MLPs in those, K = V on global layers with their own KV head count, proportional RoPE on a quarter of the
# global head.
ple = build(
    4, **COMMON, num_hidden_layers=5,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=256, num_kv_shared_layers=2, use_double_wide_mlp=True,
    final_logit_softcapping=30.0, tie_word_embeddings=True,
    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                     "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                        "rope_theta": 1000000.0}})
folder = save_reference(ple, "gemma4-tiny-ple", note="PLE, KV sharing (2 layers), double-wide MLP, k_eq_v with 1 "
                        "global KV head, head_dim 8 local / 16 global, proportional RoPE 0.25, window 8, final soft-cap 30")
# Each layer's per-layer input is a slice of one packed tensor (CELLM_OP_VIEW), which Vulkan has no shader for.
reference = json.loads((folder / "reference.json").read_text())
reference["skip_backends"] = {"vulkan": "declines CELLM_OP_VIEW (per-layer embeddings)"}
(folder / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")

# The 31B shape in small: no per-layer embeddings, no sharing, separate V, untied output, half-rotary globals.
dense = build(
    5, **COMMON, num_hidden_layers=4,
    layer_types=["sliding_attention", "sliding_attention", "full_attention", "full_attention"],
    num_key_value_heads=2, head_dim=8, global_head_dim=12, attention_k_eq_v=False,
    hidden_size_per_layer_input=0, num_kv_shared_layers=0, final_logit_softcapping=None, tie_word_embeddings=False,
    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                     "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                        "rope_theta": 1000000.0}})
save_reference(dense, "gemma4-tiny-dense", note="no PLE, no KV sharing, separate V, untied output, head_dim 8 local "
               "/ 12 global, proportional RoPE 0.5, window 8, no soft-cap")
