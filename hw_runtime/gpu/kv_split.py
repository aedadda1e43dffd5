"""The KV-split rule of the split-KV decode kernels (Triton ``decode_attn``, FlashInfer's
``flashinfer_attn``): defined in ``subgpu_jax.model.kvsplit``, where the model's attention
kernels take their CTA count from it too, so the two never differ."""

from __future__ import annotations

from subgpu_jax.model.kvsplit import BLOCK_N, MAX_SPLITS, num_kv_splits

__all__ = ["BLOCK_N", "MAX_SPLITS", "num_kv_splits"]
