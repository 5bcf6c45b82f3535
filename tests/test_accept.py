"""dflash-doctor accept against real HTTP servers on 127.0.0.1 (tests/metrics_server.py):
metrics produced by prometheus_client under vLLM's names and labels, counters that
advance between samples, and an OpenAI-compatible stub (SGLang: test_accept_sglang.py)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import prometheus_client
import pytest

from conftest import assert_error, run_cli
from metrics_server import (
    COLLAPSED,
    DEGRADED,
    HEALTHY,
    OFFSET_LIKE,
    FakeEngine,
    acceptance_length,
    free_port,
    geometric,
)

QWEN3_8B = ("--drafter", "Qwen3-8B-DFlash-b16")


@pytest.fixture(scope="module")
def validator():
    document = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "accept-v1.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document, format_checker=jsonschema.FormatChecker())


@pytest.fixture
def accept(cli, validator):
    """``accept(...)`` -> (exit code, JSON report); every report must match its schema."""

    def run(*args: str) -> tuple[int, dict]:
        proc = cli("accept", *args, "--format", "json")
        assert proc.stdout, (proc.returncode, proc.stderr)
        report = json.loads(proc.stdout)
        assert [error.message for error in validator.iter_errors(report)] == []
        assert report["exit_code"] == proc.returncode
        return proc.returncode, report

    return run


def idle(engine: FakeEngine, scrape: int) -> None:
    """Scrapes advance nothing."""


# -- measuring ---------------------------------------------------------------


@pytest.mark.slow
def test_healthy_window_reports_the_deltas_within_band(accept):
    with FakeEngine({"m": HEALTHY}) as engine:
        engine.step()
        engine.step()  # traffic before the window must not count
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.3", *QWEN3_8B, "--dataset", "gsm8k")
    assert code == 0
    assert report["schema"] == "dflash-doctor/accept/v1"
    assert report["drafts"] == 1000 and report["accepted_tokens"] == 5500 and report["draft_tokens"] == 15000
    assert report["acceptance_length"] == pytest.approx(acceptance_length(HEALTHY), abs=0.01)
    assert report["draft_acceptance_rate"] == pytest.approx(5500 / 15000, abs=1e-4)
    assert len(report["per_position"]) == 15
    assert report["per_position"] == pytest.approx(HEALTHY, abs=0.002)
    assert sum(report["per_position"]) == pytest.approx(report["acceptance_length"] - 1, abs=0.01)
    assert report["window_s"] >= 0.3 and not report["restarted"]
    expected = report["expected"]
    assert expected["drafter"] == "z-lab/Qwen3-8B-DFlash-b16" and expected["dataset"] == "gsm8k"
    assert expected["acceptance_length"] == 6.55 and expected["tolerance"] == 0.95
    assert expected["floor"] == pytest.approx(0.95 * 6.55)
    assert "z-lab/dflash" in expected["source"]["url"]
    assert report["diagnosis"]["code"] == "within-band"
    assert report["exit_code"] == 0


@pytest.mark.slow
def test_without_window_reports_totals_since_start(accept):
    with FakeEngine({"m": HEALTHY}) as engine:
        engine.step()
        engine.step()
        code, report = accept("--metrics-url", engine.url)  # a bare server address means its /metrics
    assert code == 0
    assert report["source"]["url"] == engine.metrics_url
    assert report["drafts"] == 3000  # two steps before, one on the scrape
    assert report["window_s"] is None and report["expected"] is None
    assert report["diagnosis"]["code"] == "no-reference"
    assert report["acceptance_length"] == pytest.approx(acceptance_length(HEALTHY), abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["z-lab/Qwen3.6-27B-DFlash", "Qwen3.5-27B-DFlash", "my-org/own-drafter"])
def test_any_drafter_is_judged_and_published_figures_only_add_the_comparison(accept, drafter):
    """Issue 21.3: the README's headline drafter (no published acceptance length) and an unknown one are judged
    like no --drafter: a collapse fails, healthy traffic passes, and the report says why nothing is compared."""
    with FakeEngine({"m": COLLAPSED}) as engine:
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2", "--drafter", drafter)
    assert (code, report["diagnosis"]["code"], report["expected"]) == (1, "collapse", None)
    with FakeEngine({"m": HEALTHY}) as engine:
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2", "--drafter", drafter)
    assert (code, report["diagnosis"]["code"], report["expected"]) == (0, "no-reference", None)
    text = report["diagnosis"]["text"]
    if drafter.startswith("my-org"):
        assert "knows no published acceptance length for drafter 'my-org/own-drafter'" in text
    else:
        assert "no acceptance length is published for z-lab/Qwen3." in text
        assert "https://huggingface.co/z-lab/Qwen3.6-35B-A3B-DFlash" in text


@pytest.mark.slow
def test_collapse_fails_even_without_drafter(accept):
    with FakeEngine({"m": COLLAPSED}) as engine:
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2")
    assert code == 1
    assert report["acceptance_length"] == pytest.approx(1.18, abs=0.01)
    assert report["per_position"][0] == pytest.approx(0.15, abs=0.002)
    assert max(report["per_position"][1:]) <= 0.02
    diagnosis = report["diagnosis"]
    assert diagnosis["code"] == "collapse"
    for words in ("position 0 accepts 15%", "starts from the first drafted token", "mask token", "swa-config", "3-15%"):
        assert words in diagnosis["text"]


@pytest.mark.slow
def test_offset_like_loss_points_to_layer_offset(accept):
    with FakeEngine({"m": OFFSET_LIKE}) as engine:
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2", *QWEN3_8B, "--dataset", "gsm8k")
    assert code == 1
    assert report["acceptance_length"] == pytest.approx(acceptance_length(OFFSET_LIKE), abs=0.01)
    assert 0.85 * 6.55 < report["acceptance_length"] < 0.95 * 6.55
    assert report["diagnosis"]["code"] == "uniform-loss"
    assert "layer-offset" in report["diagnosis"]["text"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "prompt_tokens, code, words",
    [(12000, "context-decay", "prompts of 12000 tokens"), (180, "large-loss", "prompts of 180 tokens")],
)
def test_large_loss_with_long_or_short_prompts(prompt_tokens, code, words, accept):
    with FakeEngine({"m": DEGRADED}, prompt_tokens=prompt_tokens) as engine:
        rc, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2", *QWEN3_8B, "--dataset", "humaneval")
    assert rc == 1
    assert report["mean_prompt_tokens"] == prompt_tokens
    assert report["diagnosis"]["code"] == code
    text = report["diagnosis"]["text"]
    assert words in text and "swa-config" in text and "under 2048 tokens" in text


@pytest.mark.slow
def test_idle_server_is_too_little_data(accept):
    with FakeEngine({"m": HEALTHY}, on_scrape=idle) as engine:
        engine.step()  # earlier traffic, before the window
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2", *QWEN3_8B)
    assert code == 2
    assert report["drafts"] == 0 and report["acceptance_length"] is None and report["per_position"] == []
    assert report["draft_acceptance_rate"] is None
    assert report["diagnosis"]["code"] == "too-little-data"
    assert "No drafts recorded in the window" in report["diagnosis"]["text"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "profile, drafts, code, rc",
    [(HEALTHY, 40, "too-little-data", 2), (COLLAPSED, 40, "collapse", 1), (COLLAPSED, 4, "too-little-data", 2)],
)
def test_few_drafts(profile, drafts, code, rc, accept):
    with FakeEngine({"m": profile}, engines=1, drafts_per_step=drafts) as engine:
        got_rc, report = accept("--metrics-url", engine.metrics_url, "--window", "0.1")
    assert (got_rc, report["diagnosis"]["code"], report["drafts"]) == (rc, code, drafts)
    assert report["acceptance_length"] is not None


@pytest.mark.slow
def test_min_drafts_is_an_option(accept):
    with FakeEngine({"m": HEALTHY}, engines=1, drafts_per_step=40) as engine:
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.1", "--min-drafts", "20")
    assert code == 0 and report["diagnosis"]["code"] == "no-reference"


@pytest.mark.slow
def test_fewer_draft_tokens_than_the_figures_assume_is_noted(accept):
    with FakeEngine({"m": geometric(0.9, positions=7)}) as engine:
        _, report = accept("--metrics-url", engine.metrics_url, "--window", "0.1", *QWEN3_8B, "--dataset", "gsm8k")
    assert len(report["per_position"]) == 7
    assert any("drafts 7 tokens per step" in note for note in report["notes"])


# -- restarts ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("expose_created", [True, False])
def test_counters_going_backwards_mean_a_restart(expose_created, accept):
    def restart_on_second(engine: FakeEngine, scrape: int) -> None:
        if scrape == 2:
            engine.restart()
        engine.step()

    with FakeEngine({"m": HEALTHY}, on_scrape=restart_on_second, expose_created=expose_created) as engine:
        for _ in range(4):
            engine.step()  # 5000 drafts before the restart, 1000 after
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2")
    assert code == 0
    assert report["restarted"] is True
    assert report["drafts"] == 1000 and report["acceptance_length"] == pytest.approx(
        acceptance_length(HEALTHY), abs=0.01
    )
    assert all(rate >= 0 for rate in report["per_position"]) and report["draft_acceptance_rate"] > 0
    assert any("restarted" in note for note in report["notes"])


@pytest.mark.slow
def test_restart_is_seen_by_created_time_when_new_counts_overtake_old_ones(accept):
    def restart_and_run(engine: FakeEngine, scrape: int) -> None:
        if scrape == 2:
            engine.restart()
            for _ in range(3):
                engine.step()
        else:
            engine.step()

    with FakeEngine({"m": HEALTHY}, on_scrape=restart_and_run) as engine:
        _, report = accept("--metrics-url", engine.metrics_url, "--window", "0.2")
    assert report["restarted"] is True
    assert report["drafts"] == 3000  # everything since the restart, not 3000 - 1000


# -- models --------------------------------------------------------------------


@pytest.mark.slow
def test_model_filter(accept, cli):
    with FakeEngine({"a": HEALTHY, "b": COLLAPSED}) as engine:
        code_a, a = accept("--metrics-url", engine.metrics_url, "--window", "0.1", "--model", "a")
        code_b, b = accept("--metrics-url", engine.metrics_url, "--window", "0.1", "--model", "b")
        code_all, both = accept("--metrics-url", engine.metrics_url, "--window", "0.1")
        missing = cli("accept", "--metrics-url", engine.metrics_url, "--model", "zzz")
    assert (code_a, a["diagnosis"]["code"], a["source"]["model"]) == (0, "no-reference", "a")
    assert a["acceptance_length"] == pytest.approx(acceptance_length(HEALTHY), abs=0.01)
    assert (code_b, b["diagnosis"]["code"]) == (1, "collapse")
    assert both["drafts"] == 2000
    assert both["acceptance_length"] == pytest.approx(1 + (sum(HEALTHY) + sum(COLLAPSED)) / 2, abs=0.01)
    assert_error(missing, "no spec-decode counters for model 'zzz' (models: a, b)")


# -- endpoints that cannot be read ------------------------------------------------


@pytest.mark.slow
def test_unreachable_endpoint():
    assert_error(run_cli("accept", "--metrics-url", f"http://127.0.0.1:{free_port()}/metrics"), "cannot read")


@pytest.mark.slow
def test_http_500(cli):
    with FakeEngine(metrics_status=500) as engine:
        assert_error(cli("accept", "--metrics-url", engine.metrics_url), "HTTP 500")


@pytest.mark.slow
def test_non_prometheus_body(cli):
    with FakeEngine(metrics_body="<html><body>vLLM dashboard</body></html>") as engine:
        assert_error(cli("accept", "--metrics-url", engine.metrics_url), "did not answer Prometheus text")


@pytest.mark.slow
def test_prometheus_without_spec_decode_counters(cli):
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Gauge("vllm:num_requests_running", "Running requests.", ["model_name"], registry=registry).labels(
        "m"
    ).set(3)
    with FakeEngine(metrics_body=prometheus_client.generate_latest(registry).decode()) as engine:
        assert_error(cli("accept", "--metrics-url", engine.metrics_url), "speculative decoding is not enabled")


@pytest.mark.slow
def test_second_sample_unreadable_is_an_error(tmp_path):
    target = tmp_path / "accept.json"
    with FakeEngine(metrics_status=503, fail_from_scrape=2) as engine:
        proc = run_cli("accept", "--metrics-url", engine.metrics_url, "--window", "0.1", "--output", str(target))
        assert engine.scrapes == 2
    assert_error(proc, "HTTP 503")
    assert not target.exists()


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((), "give --metrics-url"),
        (("--metrics-url", "file:///etc/passwd"), "must be an http:// or https:// URL"),
        (("--metrics-url", "http://127.0.0.1:1/metrics", "--window", "0"), "--window must be more than 0"),
        (("--metrics-url", "http://127.0.0.1:1", "--engine", "tgi"), "--engine: no engine called 'tgi'"),
        (("--metrics-url", "http://127.0.0.1:1/metrics", "--dataset", "gsm8k"), "give --drafter too"),
        (("--metrics-url", "http://127.0.0.1:1/metrics", *QWEN3_8B, "--dataset", "nope"), "published: gsm8k"),
        (
            ("--metrics-url", "http://127.0.0.1:1/metrics", "--drafter", "Qwen3.8-27B-DFlash2"),
            "temperature 0 (published: 1)",
        ),
        (("--metrics-url", "http://127.0.0.1:1/metrics", "--base-url", "http://127.0.0.1:1"), "give --prompts too"),
    ],
)
def test_bad_arguments(args, fragment, cli):
    assert_error(cli("accept", *args), fragment)


# -- reference figures -----------------------------------------------------------


@pytest.mark.slow
def test_reference_figures_and_sources():
    from dflash_doctor.accept.reference import expected_for, load_reference

    reference = load_reference()
    assert reference.tolerance == 0.95 and "vllm" in reference.tolerance_source.url
    for drafter in reference.drafters:
        for figures in drafter.figures:
            assert figures.source.url.startswith("https://") and figures.acceptance_length
            assert all(1 < tau <= figures.block_size for _, tau in figures.acceptance_length)
    issue_figures = {"gsm8k": 6.55, "humaneval": 6.55, "mt-bench": 4.25}
    for dataset, tau in issue_figures.items():
        assert expected_for("z-lab/Qwen3-8B-DFlash-b16", dataset, 0).figure == tau
    assert expected_for("qwen3-8b-dflash-b16", "MT_Bench", 1).figure == 3.74
    lowest = expected_for("Qwen3-8B-DFlash-b16", None, 0)
    assert (lowest.figure, lowest.figure_dataset, lowest.dataset) == (3.16, "alpaca", None)


@pytest.mark.slow
def test_the_schema_rejects_a_wrong_report(accept, validator):
    with FakeEngine({"m": HEALTHY}) as engine:
        _, report = accept("--metrics-url", engine.metrics_url, *QWEN3_8B)
    report["diagnosis"]["code"] = "fine"
    report["acceptance_length"] = 0.5
    del report["expected"]["floor"]
    assert len(list(validator.iter_errors(report))) == 3


@pytest.mark.slow
def test_without_dataset_the_lowest_figure_is_the_bar(accept):
    with FakeEngine({"m": DEGRADED}) as engine:
        code, report = accept("--metrics-url", engine.metrics_url, "--window", "0.1", *QWEN3_8B)
    assert code == 0  # 4.40 is above 0.95 x alpaca's 3.16
    assert report["expected"]["dataset"] is None and report["expected"]["figure_dataset"] == "alpaca"


# -- a fixed workload ------------------------------------------------------------


def write_prompts(path, lines) -> str:
    """One JSON value a line; None for a blank line."""
    path.write_text("".join("\n" if line is None else json.dumps(line) + "\n" for line in lines))
    return str(path)


@pytest.mark.slow
def test_prompts_are_sent_between_the_samples(tmp_path, accept):
    prompts = write_prompts(
        tmp_path / "prompts.jsonl",
        [
            "What is 2 + 2?",
            {
                "messages": [{"role": "user", "content": "Write a haiku."}],
                "chat_template_kwargs": {"enable_thinking": False},
            },
            {"prompt": "def fib(n):", "max_tokens": 32},
            {"turns": ["Explain TCP.", "And UDP?"]},
            None,
            *[f"Question {i}" for i in range(4)],
        ],
    )
    with FakeEngine({"m": HEALTHY}, on_scrape=idle, request_seconds=0.1, drafts_per_request=60) as engine:
        code, report = accept(
            "--metrics-url", engine.metrics_url, "--prompts", prompts, "--concurrency", "3", "--max-tokens", "64"
        )
        requests = engine.requests
        max_in_flight = engine.max_in_flight
    assert code == 0
    assert report["drafts"] == 8 * 60  # only the workload: scrapes advance nothing
    assert report["acceptance_length"] == pytest.approx(acceptance_length(HEALTHY), abs=0.02)
    load = report["load"]
    assert (load["prompts"], load["answered"], load["failed"], load["model"]) == (8, 8, 0, "m")
    assert load["base_url"] == engine.url + "/v1"
    assert report["window_s"] >= 0.25  # 8 requests of 0.1 s, 3 at a time
    assert 2 <= max_in_flight <= 3
    bodies = {json.dumps(body.get("messages") or body.get("prompt")): (path, body) for path, body in requests}
    assert len(requests) == 8 and all(body["model"] == "m" and body["temperature"] == 0 for _, body in requests)
    path, body = bodies[json.dumps("def fib(n):")]
    assert path == "/v1/completions" and body["max_tokens"] == 32
    path, body = bodies[json.dumps([{"role": "user", "content": "Explain TCP."}])]
    assert path == "/v1/chat/completions" and body["max_tokens"] == 64 and "turns" not in body
    _, body = bodies[json.dumps([{"role": "user", "content": "Write a haiku."}])]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.slow
def test_prompts_with_window_wait_for_the_window(tmp_path, accept):
    prompts = write_prompts(tmp_path / "p.jsonl", ["one", "two"])
    with FakeEngine({"m": HEALTHY}, on_scrape=idle, drafts_per_request=60) as engine:
        code, report = accept(
            "--metrics-url", engine.metrics_url, "--prompts", prompts, "--window", "0.5", "--min-drafts", "100"
        )
    assert report["window_s"] >= 0.5 and report["drafts"] == 120 and code == 0


@pytest.mark.slow
def test_prompt_timeouts_are_counted_not_fatal(tmp_path, accept):
    prompts = write_prompts(tmp_path / "p.jsonl", ["slow one", "fast one", "fast two"])
    with FakeEngine({"m": HEALTHY}, on_scrape=idle, slow_seconds=3, drafts_per_request=60) as engine:
        code, report = accept(
            "--metrics-url", engine.metrics_url, "--prompts", prompts, "--request-timeout", "0.5", "--min-drafts", "100"
        )
    load = report["load"]
    assert (load["answered"], load["failed"]) == (2, 1)
    assert load["errors"] == ["no answer within 0.5 s"]
    assert report["drafts"] == 120 and code == 0


@pytest.mark.slow
def test_workload_model_and_base_url(tmp_path, cli):
    prompts = write_prompts(tmp_path / "p.jsonl", ["one", "two"])
    with FakeEngine({"m": HEALTHY}, on_scrape=idle) as engine:
        proc = cli(
            "accept", "--metrics-url", engine.metrics_url, "--prompts", prompts, "--base-url", engine.url + "/v1/"
        )
        assert proc.returncode == 0  # the served model is asked for (GET /v1/models)
        other = cli("accept", "--metrics-url", engine.metrics_url, "--prompts", prompts, "--model", "m")
        assert other.returncode == 0
    with FakeEngine({"m": HEALTHY}, on_scrape=idle) as engine:
        unreachable = f"http://127.0.0.1:{free_port()}"
        assert_error(
            cli(
                "accept",
                "--metrics-url",
                engine.metrics_url,
                "--prompts",
                prompts,
                "--base-url",
                unreachable,
                "--model",
                "m",
            ),
            "none of the 2 prompts was answered",
        )


@pytest.mark.slow
def test_several_served_models_need_model(tmp_path, cli):
    prompts = write_prompts(tmp_path / "p.jsonl", ["one"])
    with FakeEngine({"a": HEALTHY, "b": HEALTHY}, on_scrape=idle) as engine:
        assert_error(
            cli("accept", "--metrics-url", engine.metrics_url, "--prompts", prompts),
            "serves 2 models (a, b): give --model",
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, fragment",
    [
        ('"one"\n{not json\n', "p.jsonl:2: not JSON"),
        ('{"text": "no prompt key"}\n', "p.jsonl:1: needs 'messages', 'prompt' or 'turns'"),
        ("\n\n", "no prompts"),
        ("[1, 2]\n", "p.jsonl:1: a prompt is a JSON string or object"),
    ],
)
def test_bad_prompts_file_fails_before_anything_is_sent(tmp_path, content, fragment, cli):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with FakeEngine({"m": HEALTHY}) as engine:
        assert_error(cli("accept", "--metrics-url", engine.metrics_url, "--prompts", str(path)), fragment)
        assert engine.scrapes == 0 and engine.requests == []


def test_missing_prompts_file(tmp_path, cli):
    assert_error(
        cli("accept", "--metrics-url", "http://127.0.0.1:1/metrics", "--prompts", str(tmp_path / "none.jsonl")),
        "no such file",
    )


# -- output ---------------------------------------------------------------------------


@pytest.mark.slow
def test_output_file_and_table(tmp_path):
    target = tmp_path / "accept.json"
    with FakeEngine({"m": COLLAPSED}) as engine:
        to_file = run_cli("accept", "--metrics-url", engine.metrics_url, "--format", "json", "--output", str(target))
        table = run_cli(
            "accept", "--metrics-url", engine.metrics_url, "--window", "0.1", *QWEN3_8B, "--dataset", "mt-bench"
        )
    assert to_file.returncode == 1 and to_file.stdout == "" and to_file.stderr == ""
    assert json.loads(target.read_text())["diagnosis"]["code"] == "collapse"
    assert table.returncode == 1
    lines = {line.split()[0]: line for line in table.stdout.splitlines() if line.strip()}
    assert "1.18 mean acceptance length" in lines["acceptance"]
    assert ">= 4.04 = 0.95 x 4.25" in lines["expected"]
    assert lines["diagnosis"].split()[1] == "collapse:"


@pytest.mark.slow
def test_progress_is_shown_on_a_terminal_only():
    with FakeEngine({"m": HEALTHY}) as engine:
        args = [sys.executable, "-m", "dflash_doctor", "accept", "--metrics-url", engine.metrics_url, "--window", "0.6"]
        plain = subprocess.run([*args, "--format", "json"], capture_output=True, text=True, timeout=60)
        leader, follower = pty.openpty()
        shown = bytearray()

        def drain() -> None:
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed
                    return
                if not chunk:
                    return
                shown.extend(chunk)

        reader = threading.Thread(target=drain)
        reader.start()
        env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
        proc = subprocess.Popen([*args, "--format", "json"], stdout=subprocess.PIPE, stderr=follower, env=env)
        os.close(follower)
        stdout, _ = proc.communicate(timeout=60)
        reader.join(timeout=10)
        os.close(leader)
    assert plain.returncode == 0 and plain.stderr == ""
    assert proc.returncode == 0 and json.loads(stdout)["drafts"] == 1000
    assert b"waiting for the second sample" in shown


def test_cli_start_does_not_import_prometheus_client():
    probe = "import sys, dflash_doctor.cli; print('prometheus_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
