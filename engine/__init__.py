"""The inference engine. Models take token ids and return logits; nothing here knows HTTP or JSON.

Entry points: `engine.checkpoint.loader.load_model` (checkpoint → `LoadedModel`: parameters on a
device mesh and a jitted pure forward function); model families in `engine.families`; shared
layers in `engine.layers` (axis letters in `engine/GLOSSARY.md`); sharding rules in
`engine.sharding`; text ↔ token ids in `engine.tokenizer`.
"""
