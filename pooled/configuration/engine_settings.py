"""The engine's settings: the context, the decode lanes, weights and KV cache, prefill, drafts, the
prefix cache, devices and a process group. `Settings` (pooled/configuration/settings.py) holds
them with the server's; every field is documented, parsed and derived like any other setting."""

from __future__ import annotations

from dataclasses import dataclass

from pooled.configuration.setting_types import boolean, host_port, integer, number, one_of, setting, text


@dataclass(frozen=True)
class EngineSettings:
    ctx: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Context length in tokens; default: the model's trained length, or where that is under 32768 (what "
        "coding agents' prompts need), 32768 by RoPE scaling as far as the KV memory holds one full row "
        "(pooled/configuration/context_policy.py). Beyond the trained length only with --rope-scaling.",
        change="reload",
    )
    rope_scaling: str | None = setting(
        None,
        text(nullable=True),
        "RoPE scaling to reach a --ctx beyond the trained length: linear, dynamic or yarn; without --ctx, what "
        "extends a short trained context (default: the checkpoint's own kind where it extends, else dynamic: "
        "unlike yarn it leaves every context within the trained length exactly as unscaled).",
        change="reload",
    )
    decode_lanes: int = setting(
        32, integer(minimum=1), "Sequences decoded at once; `n` above it is a 400.", change="reload"
    )
    dtype: str = setting(
        "auto", text(), "Weight and compute dtype: auto, float32 or bfloat16 (auto picks per backend).", change="reload"
    )
    quantization: str = setting(
        "auto",
        one_of("auto", "none", "gguf", "w8a8", "w4a8"),
        "auto: where the native CPU kernels run, a GGUF's own blocks: w4a8 for a GGUF whose projections "
        "are all Q4_1 (the default model's), gguf for any other GGUF whose matrices are all Q4_0, Q4_1, "
        "Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K (Q4_K_M, Q5_K_M, Q8_0 files…); else none. gguf: every "
        "matrix, embedding and output head included, kept in the file's own blocks and format (memory "
        "≈ the file's size) and run on native CPU kernels with activations quantized per block as "
        "llama.cpp quantizes them; a model it cannot serve is refused, saying why. w8a8: projections "
        "and output head as int8 × int8 matmuls (int8 weights, activations quantized per token): on the "
        "CPU faster than float32 for some accuracy (SmolLM2-135M: perplexity +3-5 %). w4a8: "
        "the projections in Q4_1 blocks, a Q4_1 GGUF's own (embedding and output head int8), run on a native "
        "CPU kernel with activations quantized per block of 32 (perplexity +1 %; without the kernel, as "
        "w8a8). See docs/BENCHMARKS.md for speed on two machines. none: the weights in --dtype.",
        change="reload",
    )
    kv_cache_dtype: str = setting(
        "bfloat16",
        one_of("bfloat16", "float32", "auto"),
        "KV cache dtype. bfloat16 holds twice the tokens of float32 in the same memory, for 0.1 % perplexity "
        "(docs/BENCHMARKS.md); the CPU's attention kernels read it as float32, XLA's attention (other platforms) "
        "multiplies it in bfloat16 with float32 sums. auto: the weights' (--dtype).",
        change="reload",
    )
    kv_memory: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Bytes of KV cache; default: on the CPU room for every lane's full context, at most 2 GiB; "
        "on an accelerator 80 % of the memory left after the weights.",
        change="reload",
    )
    page_size: int = setting(
        16, integer(minimum=1), "Tokens per KV-cache page, also the prefix cache's granularity.", change="reload"
    )
    prefill_chunk: int = setting(
        512,
        integer(minimum=1),
        "Prompt tokens prefilled per step; a long prompt holds running streams back one chunk at most "
        "(on the CPU 512 prefilled a 3k-token prompt ~8 % faster than 256, and 1024 slower).",
        change="reload",
    )
    draft_tokens: int = setting(
        4,
        integer(minimum=0),
        "Prompt-lookup drafts: the most tokens a decoding row guesses from text its prompt or output "
        "already holds (what followed the latest earlier occurrence of its last tokens), checked in one "
        "step, so copied text costs fewer steps; the output is what decoding without them gives. 0: off.",
        change="reload",
    )
    draft_rows: int = setting(
        1,
        integer(minimum=0),
        "Prompt-lookup drafts are made only while at most this many rows decode (one: an agent's turn); "
        "a step over several rows' drafts costs more per position, so it pays only where most guesses hold.",
        change="reload",
    )
    burst_steps: int = setting(
        8,
        integer(minimum=0),
        "Decode bursts: this many decode steps in one device call for rows with no draft and no grammar "
        "(each row stops at its stop ids or max_tokens inside the burst), so the host's work per call "
        "is spread over that many tokens; the output is what single steps give. 0: off, one call a token.",
        change="reload",
    )
    burst_max_step_ms: float = setting(
        20.0,
        number(minimum=0),
        "Bursts run only while the last decode step took at most this many milliseconds a token: a "
        "request arriving during a burst waits for all its steps before its prompt prefills, so bursts "
        "serve short steps (a GPU, a small model), where the host's per-call work weighs; 0: never.",
        change="reload",
    )
    compile_while_serving: bool = setting(
        True,
        boolean(),
        "Start serving once the largest shape of each kind is compiled (any step fits it, padded) and "
        "compile the smaller, faster ones while the engine is idle, one at a time, so a request waits "
        "for at most one compile (/health's engine.pending_buckets counts what is left); false: every "
        "shape before serving. A process group always compiles every shape first.",
        change="reload",
    )
    vision_enabled: bool = setting(
        True,
        boolean(),
        "Take images when the model has a vision tower (Qwen2-VL, Qwen2.5-VL): image parts on Chat "
        "Completions, Responses and Messages. false: the model serves text only and an image is a 400.",
        change="reload",
    )
    max_image_pixels: int = setting(
        1280 * 28 * 28,
        integer(minimum=56 * 56),
        "Most pixels an image is resized to before the vision tower (the model's own limit may be lower); "
        "it bounds the tower's compiled sizes and an image's tokens (one per 28 x 28 pixels on Qwen2-VL).",
        change="reload",
    )
    image_cache: int = setting(
        64,
        integer(minimum=0),
        "Images whose embeddings the engine keeps (by their bytes), so an image sent again skips the tower.",
        change="reload",
    )
    prefix_cache_dir: str = setting(
        "~/.cache/pooled/prefix",
        text(),
        "Folder of the prefix cache's disk tier: the KV pages of prompts prefilled before, kept across "
        "restarts (one subfolder per model, dtype, quantization and every setting that changes the numbers; "
        "each entry checksummed, a damaged or foreign one ignored), so an agent's tools and system prompt "
        "are read back instead of prefilled again after a restart. Empty: no disk tier.",
        change="reload",
    )
    prefix_cache_disk: int = setting(
        4 << 30,
        integer(minimum=0),
        "Bytes the prefix cache's disk tier may hold; the least recently used pages go first "
        "(the default model's pages take 368 KiB each, 23 KiB a token, in bfloat16). 0: no disk tier.",
        change="reload",
    )
    devices: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "How many accelerator devices to shard over; default: all.",
        change="reload",
    )
    coordinator: str | None = setting(
        None,
        host_port(nullable=True),
        "HOST:PORT of the process group's coordinator (process 0's address) when one model runs over "
        "several processes (docs/deploy.md); JAX_COORDINATOR_ADDRESS, or a cluster JAX detects (SLURM, "
        "Open MPI, Kubernetes, Cloud TPU), sets it too. None: one process.",
        change="restart",
    )
    num_processes: int | None = setting(
        None,
        integer(minimum=1, nullable=True),
        "Processes in the group (with --coordinator); default: what JAX detects.",
        change="restart",
    )
    process_id: int | None = setting(
        None,
        integer(minimum=0, nullable=True),
        "This process's place in the group: 0 serves HTTP and schedules, the others follow it; "
        "default: what JAX detects.",
        change="restart",
    )
    group_step_timeout: float = setting(
        300.0,
        number(above=0),
        "Seconds one call of process 0's runner may take before the group counts as hung (a process stopped "
        "answering without dying, so no collective ever fails): process 0 logs the cause and exits 1, as "
        "NCCL's watchdog does, for a supervisor to restart the group. Compiling does not count.",
        change="restart",
    )
    group_heartbeat_timeout: int = setting(
        100,
        integer(minimum=1),
        "Seconds the group's coordinator waits for a silent process before it counts it dead (a process "
        "that exits or crashes is found at once, by the next step).",
        change="restart",
    )
