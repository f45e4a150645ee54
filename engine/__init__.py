"""The inference engine: token ids in, token ids out; nothing here knows HTTP or JSON.

Entry points: `engine.api` (what handlers submit and receive, and the `EngineFront` they
call); `engine.engine.Engine` (the front door: intake → scheduler → runner → device; `TaskEngine`
for task runners alone); `engine.tasks` (the tasks besides generation, and how one plugs in);
`engine.model.checkpoint.loader.load_model` (checkpoint → `LoadedModel`: parameters on a device mesh
and a jitted pure forward function); model families in `engine.model.families`; shared layers in
`engine.model.layers` (axis letters in `engine/GLOSSARY.md`); sharding rules in `engine.model.sharding`;
text ↔ token ids in `text`.
"""
