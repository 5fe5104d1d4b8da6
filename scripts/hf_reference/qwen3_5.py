"""A tiny random Qwen3.5 (text) model from transformers' own Qwen3_5ForCausalLM, the reference for cellm's qwen35 arch.
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/qwen3_5.py

Gated DeltaNet (linear attention) layers alternate with gated full-attention layers, so the reference exercises the
recurrent state, the causal convolution and the paged KV cache in one model. The DeltaNet value heads outnumber the
key heads (each key head serves two consecutive value heads) and have another width, so a mix-up of heads or of
the state's two dimensions changes the logits.
"""
import json

import torch
import transformers

from common import randomize, save_reference

config = transformers.Qwen3_5TextConfig(
    vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=8, linear_num_key_heads=2,
    linear_num_value_heads=4,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})

torch.manual_seed(0)
model = transformers.Qwen3_5ForCausalLM(config)
# Qwen3.5's RMSNorms multiply by (1 + w) and start at w = 0, so their gains get plain noise; the gated norm of the
# DeltaNet output (linear_attn.norm) multiplies by w directly and keeps randomize's 1 + noise.
randomize(model, seed=5, norm=lambda w: 1.0 + 0.1 * w)
gen = torch.Generator().manual_seed(6)
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        elif name.endswith("A_log"):
            # Decay rates A = exp(A_log) from slow to fast, as trained models have, so the state remembers several
            # tokens back and the recurrence matters to the logits.
            p.copy_(torch.empty(p.shape).uniform_(0.05, 1.0, generator=gen).log())
        elif name.endswith("dt_bias"):
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
        elif name.endswith("conv1d.weight"):
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
folder = save_reference(model, "qwen3_5-tiny",
               note="linear/full attention alternating; 2 key heads for 4 value heads of another width; "
                    "partial rotary 0.25; (1 + w) norms; tied output")
# Vulkan has no shaders for the recurrent layers' ops: it declines them (one error line), and the test skips it.
reference = json.loads((folder / "reference.json").read_text())
reference["skip_backends"] = {"vulkan": "declines the recurrent-state ops (SSM_CONV, DELTA_NET) of ABI 1.2"}
(folder / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
