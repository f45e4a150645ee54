"""/health and /metrics report the engine's own snapshot; Prometheus and JSON agree."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import StubModel
from tests.fake_engine import FakeEngine


def with_engine(model: StubModel) -> FakeEngine:
    engine = FakeEngine(lambda request, row: [5, 6], vocab_size=64)
    model.engine = engine
    return engine


def test_health_reports_the_engine_plan(client: TestClient, model: StubModel) -> None:
    assert client.get("/health").json()["engine"] is None  # no engine yet: nothing to report
    with_engine(model)
    engine = client.get("/health").json()["engine"]
    assert engine["buckets"] == [{"kind": "decode", "rows": 1, "tokens": 1, "pages": 8}]
    assert engine["kv_pages"] == {"total": 64, "used": 0}
    assert engine["compiles_after_startup"] == 0


def test_metrics_json_carries_engine_counters_and_histograms(client: TestClient, model: StubModel) -> None:
    counted_by_http = {"requests_running", "requests_served_total", "requests_rate_limited_total"}
    assert set(client.get("/metrics").json()) == counted_by_http
    with_engine(model)
    metrics = client.get("/metrics").json()
    assert metrics["compiles_after_startup_total"] == 0
    ttft = metrics["time_to_first_token_seconds"]
    assert ttft["buckets"][-1] == {"le": None, "count": 0} and ttft["count"] == 0


def test_prometheus_text_has_the_same_figures(client: TestClient, model: StubModel) -> None:
    with_engine(model)
    client.post("/v1/tokenize", json={"prompt": "x"})  # one counted request, whatever its answer
    text = client.get("/metrics/prometheus").text
    assert "pooled_requests_served_total 1.0" in text
    assert 'pooled_time_to_first_token_seconds_bucket{le="+Inf"} 0.0' in text
    assert "pooled_kv_cache_usage_perc 0.0" in text


def test_banner_and_health_say_when_rope_scaling_extends_the_context(client: TestClient, model: StubModel) -> None:
    model.ctx, model.trained_ctx, model.rope_scaling = 32768, 8192, "dynamic"
    assert "Context: 32768 tokens, extended from the trained 8192 with dynamic RoPE scaling" in client.get("/").text
    health = client.get("/health").json()
    assert (health["ctx"], health["trained_ctx"], health["rope_scaling"]) == (32768, 8192, "dynamic")


def test_banner_and_health_say_how_the_weights_are_served(client: TestClient, model: StubModel) -> None:
    model.quantization = "w4a8"
    assert "Weights: the file's Q4_1 blocks on the native CPU kernel" in client.get("/").text
    assert client.get("/health").json()["quantization"] == "w4a8"
    assert client.get("/health").json()["weight_formats"] is None


def test_banner_and_health_name_the_block_formats_of_a_gguf_served_from_its_blocks(
    client: TestClient, model: StubModel
) -> None:
    model.quantization, model.weight_formats = "gguf", {"Q4_K": 16, "Q5_0": 166, "Q6_K": 14, "Q8_0": 14}
    assert "Weights: the file's own blocks on native CPU kernels (gguf): Q4_K ×16, Q5_0 ×166, Q6_K ×14, Q8_0 ×14" in (
        client.get("/").text
    )
    health = client.get("/health").json()
    assert (health["quantization"], health["weight_formats"]) == ("gguf", model.weight_formats)


def test_the_banner_says_how_to_serve_embeddings_beside_the_chat_model(client: TestClient) -> None:
    assert "start with --embedding-model DIR or --rerank-model DIR" in client.get("/").text
