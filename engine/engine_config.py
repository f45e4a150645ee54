"""`EngineConfig`: the serving engine's settings, each with its default and the reason for it."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineConfig:
    decode_lanes: int = 8  # rows decoded together in one device step
    max_queue: int = 16  # requests that may wait for lanes before submit raises QueueFull
    max_context: int = 0  # tokens per row (prompt + output); 0 = the model's context length
    # The KV pool's dtype: "auto" keeps the model's; bfloat16 halves the pool and runs attention's
    # matmuls in bfloat16 (float32 accumulation).
    kv_cache_dtype: str = "auto"
    page_size: int = 16  # tokens per KV page (also the prefix cache's granularity)
    # KV pool size: kv_pages if set, else kv_memory_bytes if set, else kv_memory_fraction of the
    # free device memory (on CPU, where jax reports none, enough pages for every lane's full context).
    kv_pages: int = 0
    kv_memory_bytes: int = 0
    kv_memory_fraction: float = 0.8
    prefill_chunk: int = 512  # prompt tokens per prefill step; bounds how long decode rows wait
    # Stop ids besides the model config's EOS ids (the tokenizer's end-of-turn ids go here).
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    # Each decode row-count bucket is this many times the last: every bucket is a start-up compile
    # of the whole model, so coarser buckets start faster and pad more per step.
    bucket_growth: int = 4
    # Prompt-lookup drafts (engine/serving/drafts.py): the most draft tokens a decoding row brings to a
    # step (0: none), and the most decoding rows for which steps take drafts. One row (an agent's
    # turn): a step of several rows' drafts costs more per position.
    draft_tokens: int = 4
    draft_rows: int = 1
    # Decode bursts (engine/device/step.py): this many decode steps in one device call, for rows
    # with no draft and no grammar, the host's work once per burst instead of once per token
    # (0: off, one device call a token).
    burst_steps: int = 0
    # Bursts run only while a decode step of the rows takes at most this long (the last settled
    # step's device time a token): a request arriving during a burst waits for all of its steps
    # before its prompt prefills, so where steps are long (a big model's many rows on a CPU) the
    # host's per-call work is a small share anyway and the wait would not be.
    burst_max_step_ms: float = 20.0
    # The prefix cache's disk tier (engine/serving/prefix_disk.py): its folder ("" = none) and byte cap.
    prefix_disk_dir: str = ""
    prefix_disk_bytes: int = 4 << 30
    # LoRA adapter slots on the device (engine/model/layers/lora.py) and their rank: every step computes
    # through max_loras x max_lora_rank columns per projection, so 0 (no adapters) keeps the steps
    # as they are without.
    max_loras: int = 0
    max_lora_rank: int = 16
    # Start serving once the largest shape of each kind is compiled (any step fits it) and compile
    # the smaller, faster ones while the engine is idle, one at a time, so a request waits for at
    # most one compile; False compiles every shape before serving.
    compile_while_serving: bool = False
    # Where the serialized executables of every compiled shape are kept (engine/device/executables.py;
    # "" = none kept: every start traces and compiles its shapes).
    executable_cache_dir: str = ""
    # Images (a model with a vision tower): off with False. The most pixels an image is resized to
    # (it bounds the tower's compiled sizes: the largest holds this many pixels' patches), and how
    # many images' embeddings the engine keeps for an image sent again.
    vision_enabled: bool = True
    max_image_pixels: int = 1280 * 28 * 28
    image_cache_images: int = 64
