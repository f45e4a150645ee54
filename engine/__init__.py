"""The inference engine: token ids in, token ids out; nothing here knows HTTP or JSON.

Entry points: `engine.api` (what handlers submit and receive, and the `GenerationEngine` they
call); `engine.engine.Engine` (the front door: intake → scheduler → runner → device);
`engine.checkpoint.loader.load_model` (checkpoint → `LoadedModel`: parameters on a device mesh
and a jitted pure forward function); model families in `engine.families`; shared layers in
`engine.layers` (axis letters in `engine/GLOSSARY.md`); sharding rules in `engine.sharding`;
text ↔ token ids in `engine.tokenizer`.
"""
