"""`make bench`'s summary of several rounds: medians per figure, ratios per round."""

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

_SPEC = importlib.util.spec_from_file_location("bench", Path(__file__).parents[2] / "tools" / "bench.py")
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
sys.modules["bench"] = bench
_SPEC.loader.exec_module(bench)


def _report(name: str, speed: float) -> Any:
    """A report whose every throughput is `speed` and every time 1 / `speed`."""
    return bench.Report(
        name,
        ttft_s={size: 1 / speed for size in bench.PROMPT_SIZES},
        resent_ttft_s=1 / speed,
        decode_tps=speed,
        aggregate_tps={n: speed for n in bench.CONCURRENCY},
        latency_p50_s={n: 1 / speed for n in bench.CONCURRENCY},
        latency_p99_s={n: 1 / speed for n in bench.CONCURRENCY},
        peak_rss_mib=speed,
        bytes_per_step=1000,
    )


def test_a_servers_figures_are_the_medians_of_its_rounds() -> None:
    median = bench.median_report([_report("pooled", s) for s in (1.0, 4.0, 2.0)])
    assert median.decode_tps == 2.0
    assert median.aggregate_tps == {n: 2.0 for n in bench.CONCURRENCY}
    assert median.ttft_s == {size: 0.5 for size in bench.PROMPT_SIZES}
    assert median.peak_rss_mib == 2.0


def test_a_ratio_is_the_median_of_each_rounds_own_ratio_with_their_range() -> None:
    # Rounds' ratios 3, 4 and 2: their median is 3, where the ratio of the medians would be 8 / 2.
    ours, theirs = [6.0, 8.0, 20.0], [2.0, 2.0, 10.0]
    assert bench.speedup(ours, theirs, higher_is_better=True) == "3.00× (2.00–4.00)"
    assert bench.speedup(theirs, ours, higher_is_better=False) == "3.00× (2.00–4.00)"
    assert bench.speedup([6.0], [2.0], higher_is_better=True) == "3.00×"
    # Only rounds where both servers were measured are compared.
    assert bench.speedup(ours, [2.0], higher_is_better=True) == "3.00×"
    assert bench.speedup([1.0], [0.0], higher_is_better=True) == "n/a"


@pytest.mark.parametrize("rounds", [1, 3])
def test_the_page_says_how_many_rounds_and_compares_the_medians(rounds: int) -> None:
    speeds = [i + 1.0 for i in range(rounds)]
    runs = [[_report("pooled", 3 * s) for s in speeds], [_report("llama-server", s) for s in speeds]]
    page = bench.markdown(runs, bandwidth=10.0, command="make bench")
    assert f"- Rounds: {rounds}, the servers taking turns" in page
    row = next(line for line in page.splitlines() if line.startswith("| single-stream decode"))
    median = (rounds + 1) / 2
    ratio = "3.00× (3.00–3.00)" if rounds > 1 else "3.00×"
    assert row == f"| single-stream decode (tokens/s) | {3 * median:.1f} | {median:.1f} | {ratio} |"


def test_long_context_figures_and_the_restart_only_pooled_has() -> None:
    pooled, llama = _report("pooled", 3.0), _report("llama-server", 1.0)
    for report, speed in ((pooled, 3.0), (llama, 1.0)):
        report.long_ttft_s = {size: 1 / speed for size in bench.LONG_SIZES}
        report.long_decode_tps = speed
    pooled.restart_ttft_s = 0.5
    page = bench.markdown([[pooled], [llama]], bandwidth=10.0, command="make bench")
    rows = {line.split(" | ")[0]: line for line in page.splitlines() if line.startswith("| ")}
    assert rows["| TTFT, 21000-token prompt, 32k context (s)"].endswith("| 0.33 | 1.00 | 3.00× |")
    assert rows["| decode at ~16k tokens of context (tokens/s)"].endswith("| 3.0 | 1.0 | 3.00× |")
    assert rows["| TTFT, agent second turn after a restart (s)"].endswith("| 0.50 | n/a | n/a |")
    without = bench.markdown([[_report("pooled", 1.0)]], bandwidth=10.0, command="make bench --no-long")
    assert "32k context" not in without


def test_one_servers_page_has_its_medians_and_no_ratios() -> None:
    page = bench.markdown([[_report("pooled", s) for s in (1.0, 4.0, 2.0)]], bandwidth=10.0, command="make bench")
    assert "- Rounds: 3; each figure is the median of the rounds" in page
    row = next(line for line in page.splitlines() if line.startswith("| single-stream decode"))
    assert row == "| single-stream decode (tokens/s) | 2.0 |"


def test_start_to_ready_rows_compare_cold_and_warm_starts() -> None:
    pooled, llama = _report("pooled", 1.0), _report("llama-server", 1.0)
    pooled.ready_s, pooled.warm_ready_s, llama.ready_s = 20.0, 4.0, 2.0
    page = bench.markdown([[pooled], [llama]], bandwidth=10.0, command="make bench")
    rows = {line.split(" | ")[0]: line for line in page.splitlines() if line.startswith("| ")}
    assert rows["| start to ready (s; pooled: nothing cached)"].endswith("| 20.0 | 2.0 | 0.10× |")
    # llama-server keeps no cache: its one start stands for both.
    assert rows["| start to ready, warm (s; pooled: its cache filled)"].endswith("| 4.0 | 2.0 | 0.50× |")


def test_greedy_agreement_is_the_share_alike_before_the_answers_part() -> None:
    tokenizer = bench.Tokenizer.from_gguf_file(bench.default_model_path())
    same = " the cat sat on the mat"
    ids = tokenizer.encode(same)
    parted = tokenizer.decode(ids[: len(ids) // 2]) + " and then a dog barked loudly"
    shares = bench.greedy_agreement(tokenizer, [same, same], [same, parted])
    assert shares[0] == 1.0
    assert 0 < shares[1] < 1 and shares[1] == len(ids) // 2 / max(len(ids), len(tokenizer.encode(parted)))
    page = bench.markdown([[_report("pooled", 1.0)], [_report("llama-server", 1.0)]], 10.0, "make bench", shares)
    assert "mean " in page and f"per prompt 100 %, {100 * shares[1]:.0f} %." in page


def test_without_the_long_figures_pooled_holds_the_context_llama_servers_slots_hold() -> None:
    short = bench.pooled_flags("/tmp/prefix", [], slots=32, long=False)
    assert short == ["--ctx", str(bench.SLOT_CONTEXT), "--decode-lanes", "32", "--prefix-cache-dir", "/tmp/prefix"]
    llama = bench.llama_command(Path("llama-server"), Path("m.gguf"), 8092, 2, 32, bench.SLOT_CONTEXT)
    assert llama[llama.index("-np") + 1] == "32" and llama[llama.index("-c") + 1] == str(32 * bench.SLOT_CONTEXT)
    assert bench.pooled_flags("/tmp/prefix", ["--ctx", "8192"], slots=4, long=False)[-2:] == ["--ctx", "8192"]
    assert "--ctx" not in bench.pooled_flags("/tmp/prefix", [], slots=32, long=True)  # 32768, for the long prompts
