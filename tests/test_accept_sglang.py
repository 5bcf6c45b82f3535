"""dflash-doctor accept against an SGLang stand-in on 127.0.0.1 (tests/sglang_server.py): its
counters over a window, the gauge of older releases, /server_info without metrics, the
drafter the server names, and garbage where SGLang's numbers should be."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import assert_error
from measure import run_measured
from metrics_server import RawServer, ok, status
from sglang_server import BLOCK, FakeSglang

pytestmark = pytest.mark.slow

QWEN3_8B = ("--drafter", "Qwen3-8B-DFlash-b16")
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def validator():
    document = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "accept-v1.schema.json").read_text())
    return jsonschema.Draft202012Validator(document, format_checker=jsonschema.FormatChecker())


@pytest.fixture
def accept(cli, validator):
    def run(*args: str) -> tuple[int, dict]:
        proc = cli("accept", *args, "--format", "json")
        assert proc.stdout, (proc.returncode, proc.stderr)
        report = json.loads(proc.stdout)
        assert [error.message for error in validator.iter_errors(report)] == []
        assert report["exit_code"] == proc.returncode
        return proc.returncode, report

    return run


def test_healthy_counters_over_a_window_are_within_band(accept):
    with FakeSglang(length=6.4, requests_per_scrape=10) as server:
        server.finish(5)  # before the window: not counted
        code, report = accept("--metrics-url", server.url, "--window", "0.2", *QWEN3_8B, "--dataset", "gsm8k")
    assert code == 0
    assert report["source"] == {
        "kind": "sglang-metrics",
        "url": server.url + "/metrics",
        "model": None,
        "engine": "sglang",
    }
    assert report["drafts"] == 500 and report["accepted_tokens"] == 500 * 6.4 - 500
    assert report["acceptance_length"] == 6.4
    assert report["draft_tokens"] == 500 * (BLOCK - 1)
    assert report["draft_acceptance_rate"] == pytest.approx(2700 / 7500, abs=1e-4)
    assert report["per_position"] == [] and report["window_s"] >= 0.2 and report["mean_prompt_tokens"] == 200
    assert report["server"] == {
        "url": server.url + "/server_info",
        "version": "0.5.23",
        "algorithm": "DFLASH",
        "block_size": 16,
        "drafter": "/models/z-lab/Qwen3-8B-DFlash-b16",
    }
    assert report["diagnosis"] == {
        "code": "within-band",
        "text": "Mean acceptance length 6.40 is within the expected band: at least 6.22, 0.95 x the 6.55 published "
        "for z-lab/Qwen3-8B-DFlash-b16 on gsm8k at temperature 0.",
    }
    assert any("when the request finishes" in note for note in report["notes"])


def test_a_collapsed_server_fails_with_the_collapse_diagnosis(accept):
    with FakeSglang(length=1.1) as server:
        server.finish(20)
        code, report = accept("--metrics-url", server.url + "/metrics")
    assert (code, report["drafts"], report["acceptance_length"]) == (1, 1000, 1.1)
    assert report["diagnosis"]["code"] == "collapse"
    assert report["diagnosis"]["text"].startswith(
        "Acceptance collapsed: mean acceptance length 1.10 (under 1.5). Drafted tokens are almost never accepted"
    )
    assert report["window_s"] is None  # totals since the start


def test_a_workload_is_counted_as_its_requests_finish(accept, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(f"Question {i}") + "\n" for i in range(6)))
    with FakeSglang(length=6.4) as server:
        server.finish(40)  # earlier traffic: not in the window
        code, report = accept("--metrics-url", server.url, "--prompts", str(prompts), *QWEN3_8B, "--dataset", "gsm8k")
    assert (code, report["diagnosis"]["code"]) == (0, "within-band")
    assert report["drafts"] == 6 * 50 and report["acceptance_length"] == 6.4
    assert (report["load"]["answered"], report["load"]["model"]) == (6, "m")
    assert report["load"]["base_url"] == server.url + "/v1" and report["mean_prompt_tokens"] == 200


def test_the_drafter_the_server_names_is_the_bar_without_drafter(accept):
    with FakeSglang(length=2.9) as server:  # below 0.95 x alpaca's 3.16, the lowest figure of Qwen3-8B-DFlash-b16
        server.finish(20)
        code, report = accept("--metrics-url", server.url)
    assert code == 1 and report["diagnosis"]["code"] == "uniform-loss"
    assert report["expected"]["drafter"] == "z-lab/Qwen3-8B-DFlash-b16"
    assert report["expected"]["figure_dataset"] == "alpaca" and report["expected"]["dataset"] is None
    assert (
        "Judged against the figures of z-lab/Qwen3-8B-DFlash-b16, the drafter the server names "
        "(/models/z-lab/Qwen3-8B-DFlash-b16)." in report["notes"]
    )


def test_an_unknown_drafter_of_the_server_is_no_reference(accept):
    with FakeSglang(length=5.0, drafter="/srv/my-own-drafter") as server:
        server.finish(20)
        code, report = accept("--metrics-url", server.url)
    assert (code, report["diagnosis"]["code"], report["expected"]) == (0, "no-reference", None)


def test_the_gauge_of_a_release_without_the_counter_is_a_fallback_with_its_caveat(accept):
    with FakeSglang(length=1.05, counters=False, gauge=1.05) as server:  # 0.5.11 and 0.5.12
        server.finish(20)
        code, report = accept("--metrics-url", server.url, "--window", "0.1")
    assert (code, report["diagnosis"]["code"]) == (1, "collapse")
    assert report["source"]["kind"] == "sglang-gauge" and report["acceptance_length"] == 1.05
    assert report["drafts"] is None and report["window_s"] is None
    assert any(
        "the figure is its gauge sglang:spec_accept_length, which covers only the last decode-log interval" in note
        for note in report["notes"]
    )


def test_without_metrics_the_server_info_average_is_read(accept):
    with FakeSglang(metrics=False, average=6.3) as server:
        code, report = accept("--metrics-url", server.url, *QWEN3_8B, "--dataset", "gsm8k")
    assert (code, report["diagnosis"]["code"]) == (0, "within-band")
    assert report["source"] == {
        "kind": "sglang-server-info",
        "url": server.url + "/server_info",
        "model": None,
        "engine": "sglang",
    }
    assert report["acceptance_length"] == 6.3 and report["drafts"] is None
    assert any("running average (avg_spec_accept_length of /server_info)" in note for note in report["notes"])


def test_a_fresh_server_has_too_little_data(accept):
    with FakeSglang() as server:  # no request finished: no spec series yet
        code, report = accept("--metrics-url", server.url)
    assert (code, report["diagnosis"]["code"], report["drafts"]) == (2, "too-little-data", 0)


def test_the_engine_told_must_be_the_one_serving(cli):
    with FakeSglang() as server:
        server.finish(1)
        assert_error(cli("accept", "--metrics-url", server.url, "--engine", "vllm"), "exposes no vllm: series")
        assert_error(cli("accept", "--metrics-url", server.url, "--engine", "trtllm"), "no engine called 'trtllm'")


def test_speculative_decoding_off(cli):
    with FakeSglang(algorithm=None) as server:
        server.finish(1)
        assert_error(
            cli("accept", "--metrics-url", server.url),
            "/server_info: speculative decoding is not enabled on this server (speculative_algorithm is none)",
        )


def test_neither_endpoint_says_what_was_asked_first(cli):
    with RawServer(lambda h: status(h, "HTTP/1.1 404 Not Found", {"Content-Length": "0"})) as server:
        assert_error(cli("accept", "--metrics-url", server.url), f"cannot read {server.url}/metrics: HTTP 404")
        assert_error(
            cli("accept", "--metrics-url", server.url, "--engine", "sglang"),
            f"cannot read {server.url}/server_info: HTTP 404",
        )


def test_without_metrics_a_workload_is_sent_only_to_a_server_that_says_it_drafts(cli, accept, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"one"\n"two"\n')
    with RawServer(lambda h: status(h, "HTTP/1.1 404 Not Found", {"Content-Length": "0"})) as server:
        proc = cli(
            "accept", "--metrics-url", server.url, "--engine", "sglang", "--prompts", str(prompts), "--model", "m"
        )
        asked = list(server.requests)
    assert_error(proc, "server_info: HTTP 404")
    assert not any(request.startswith("POST") for request in asked), asked
    with FakeSglang(metrics=False, average=6.3) as server:
        code, report = accept("--metrics-url", server.url, "--prompts", str(prompts))
    assert (code, report["source"]["kind"], report["load"]["answered"]) == (0, "sglang-server-info", 2)


# -- hostile ---------------------------------------------------------------------


def by_path(answers: dict[str, bytes]):
    """A peer answering each path with its bytes (404 elsewhere), counting what it was asked."""

    def answer(handler) -> None:
        body = answers.get(handler.path)
        if body is None:
            return status(handler, "HTTP/1.1 404 Not Found", {"Content-Length": "0"})
        ok(body, "application/json" if handler.path == "/server_info" else "text/plain")(handler)

    return answer


VERIFY = 'sglang:spec_verify_calls_total{{model_name="m",engine_type="unified"}} {verify}\n'
GENERATED = 'sglang:generation_tokens_total{{model_name="m",engine_type="unified",is_streaming="false"}} {tokens}\n'


@pytest.mark.parametrize(
    "metrics, info, fragment",
    [
        (VERIFY.format(verify=100) + GENERATED.format(tokens=50), None, "every drafting step emits at least one token"),
        ('sglang:spec_accept_length{model_name="m"} NaN\n', None, "a counter is a finite number, never negative"),
        (VERIFY.format(verify="1e999") + GENERATED.format(tokens=5), None, "a counter is a finite number"),
        (VERIFY.format(verify=10) + GENERATED.format(tokens=50), b"<html>SGLang</html>", "did not answer JSON"),
        (VERIFY.format(verify=10) + GENERATED.format(tokens=50), b'{"version": "x"}', "has no internal_states"),
        (
            None,
            b'{"internal_states": [{"avg_spec_accept_length": 1e999}], "speculative_algorithm": "DFLASH"}',
            "avg_spec_accept_length is not a finite number",
        ),
        (
            None,
            b'{"internal_states": [{"avg_spec_accept_length": true}], "speculative_algorithm": "DFLASH"}',
            "avg_spec_accept_length is not a finite number",
        ),
        (None, b'{"internal_states": [1], "speculative_algorithm": "DFLASH"}', "has no internal_states"),
        (None, b"[" * 100_000 + b"]" * 100_000, "did not answer JSON"),
    ],
    ids=[
        "fewer-tokens-than-steps",
        "nan-gauge",
        "inf-counter",
        "html-info",
        "no-states",
        "inf-average",
        "bool-average",
        "state-not-object",
        "nested",
    ],
)
def test_garbage_where_sglang_numbers_should_be_is_one_line_and_bounded(metrics, info, fragment, tmp_path):
    answers = {
        "/server_info": info if info is not None else b'{"internal_states": [{}], "speculative_algorithm": "DFLASH"}'
    }
    if metrics is not None:
        answers["/metrics"] = metrics.encode()
    target = tmp_path / "report.json"
    with RawServer(by_path(answers)) as server:
        result = run_measured(
            "accept",
            "--metrics-url",
            server.url,
            "--output",
            str(target),
            "--timeout",
            "10",
            timeout=60,
            address_space_mb=2048,
        )
        asked = list(server.requests)
    assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: error: ") and fragment in lines[0], lines
    assert not target.exists()  # nothing half-written
    assert all(request.startswith("GET /") for request in asked) and len(asked) <= 2  # only the two endpoints read
    assert result.peak_rss < 250 * MIB and result.seconds < 30, (result.peak_rss, result.seconds)


def test_the_engine_is_told_by_the_prefix_of_the_series(cli):
    vllm = b'vllm:spec_decode_num_drafts_total{model_name="m"} 5\n'
    sglang = VERIFY.format(verify=10).encode() + GENERATED.format(tokens=50).encode()
    with RawServer(by_path({"/metrics": vllm})) as server:
        assert_error(cli("accept", "--metrics-url", server.url, "--engine", "sglang"), "exposes no sglang: series")
    with RawServer(by_path({"/metrics": vllm + sglang})) as server:
        assert_error(
            cli("accept", "--metrics-url", server.url),
            "exposes series of vLLM (vllm:) and SGLang (sglang:): give --engine",
        )
    with RawServer(by_path({"/metrics": b"process_cpu_seconds_total 3\n"})) as server:
        assert_error(
            cli("accept", "--metrics-url", server.url), "exposes no series of vLLM (vllm:) or SGLang (sglang:)"
        )
