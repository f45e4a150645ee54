"""BERT and XLM-RoBERTa encoders, as embedding models or one-label cross-encoders (rerank).

- `bert`: the families, their config and the conversion of HF tensors.
- `encoder`: the Flax encoder with its pooling or classifier head.
- `gguf_encoder`: llama.cpp's `bert` GGUF read as an HF checkpoint.
"""
