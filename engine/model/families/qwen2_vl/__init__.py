"""Qwen2-VL and Qwen2.5-VL: a Qwen2 decoder with M-RoPE and an image tower.

- `qwen2_vl`: the families (config, conversion of both checkpoint layouts, the projector join).
- `vision_tower`: the tower's config (the decoder's `ImageTower`), host inputs and Flax module.
- `image_processing`: image bytes → patch rows, as transformers' image processor makes them.
- `rope_index`: a prompt's M-RoPE positions.
- `gguf_mmproj`: llama.cpp's projector GGUF read as the checkpoint's vision half.
- `projector_files`: how that split form is recognised by name and architecture, without reading it.
"""
