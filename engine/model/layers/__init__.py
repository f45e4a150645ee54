"""Layers shared by every model family, written once; each module has one job:

- `kv_cache`: the key/value caches (contiguous `LayerCache`, paged `PagedLayerCache`, a step's
  `NewKV`) and how a page pool stores its values.
- `head_major`: the batched matmuls attention is made of, over head-major queries, keys and values.
- `paged_attention`: attention over a paged cache: the native CPU kernels where they take the
  shapes, else XLA's online-softmax loop over blocks of pages.
- `attention`: the grouped-query self-attention block.
- `rope`: rotary embedding frequencies (default, linear, dynamic NTK, YaRN, Llama 3) and rotation.
- `linear`: parameters with logical axes, projections (float or int8/Q4 weights).
- `norms`: RMSNorm. `embedding`: the token embedding (and tied output head).
- `mlp`: the gated MLP and the sparse mixture of experts.
- `transformer`: the decoder layer and the whole model.
- `pooling`: hidden states → one embedding per input (an encoder's or a decoder's embedding pass).

Axis letters in einsum strings follow `engine/GLOSSARY.md`. Parameters carry logical axis names
(`engine/model/sharding.py` maps them to the mesh). Matmuls accumulate in float32 and return the
activation dtype; norms, softmax and RoPE run in float32. The layers read `ModelConfig` flags,
never a family's name, and never import a family: what makes a family differ, and a family's own
layers and towers, live in its package under the families package.
"""
