"""The inference engine: token ids in, token ids out; nothing here knows HTTP or JSON.

From outside, the way in is six public modules (docs/architecture.md, "The front door, enforced"):
`engine.api` (what handlers submit and receive, and the `EngineFront` they call: one face for
every task), `engine.errors`, `engine.stats`, `engine.front` (loading a model and building its
`Engine`: intake → scheduler → runner → device; `TaskEngine` for task runners alone),
`engine.checkpoints` (a checkpoint's files, read without loading it) and `engine.inputs` (a
request's inputs, prepared on the host). Inside: `engine.tasks` (the tasks besides generation, and
how one plugs in); `engine.model.loading.loader.load_model` (checkpoint → `LoadedModel`: parameters on a device mesh
and a jitted pure forward function); model families in `engine.model.families`; shared layers in
`engine.model.layers` (axis letters in `engine/GLOSSARY.md`); sharding rules in `engine.model.sharding`;
text ↔ token ids in `text`.
"""
