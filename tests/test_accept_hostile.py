"""dflash-doctor accept against hostile HTTP servers on 127.0.0.1 (RawServer in
tests/metrics_server.py writes its answers byte by byte): slow drips, endless
bodies, redirects elsewhere, counters that are not counts, numbers past any
float, and control characters in what the server says."""

from __future__ import annotations

import time

import pytest

from conftest import assert_error
from measure import run_measured
from metrics_server import FakeEngine, RawServer, ok, status

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
COUNTERS = (
    "# TYPE vllm:spec_decode_num_drafts counter\n"
    'vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}\n'
    "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
    'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
)


def one_line(result, fragment: str) -> None:
    assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: error: ") and fragment in lines[0], lines


def drip_headers(handler) -> None:
    """A byte a second, starting in the status line: every read gets something."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"x" * 60:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(1)


def drip_body(handler) -> None:
    status(handler, "HTTP/1.1 200 OK", {"Content-Type": "text/plain", "Content-Length": "100000"})
    for _ in range(60):
        handler.wfile.write(b"#")
        handler.wfile.flush()
        time.sleep(1)


@pytest.mark.parametrize("drip", [drip_headers, drip_body])
def test_a_server_sending_a_byte_a_second_does_not_beat_the_timeout(drip):
    with RawServer(drip) as server:
        result = run_measured("accept", "--metrics-url", server.url + "/metrics", "--timeout", "2")
    one_line(result, "no answer within 2 s")
    assert result.seconds < 10, result.seconds


def endless(chunked: bool):
    def answer(handler) -> None:
        headers = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(3 * 1024 * MIB)}
        status(handler, "HTTP/1.1 200 OK", {"Content-Type": "text/plain", **headers})
        line = b"# HELP vllm:junk " + b"x" * 1000 + b"\n"
        block = (f"{len(line) * 64:x}\r\n".encode() + line * 64 + b"\r\n") if chunked else line * 64
        for _ in range(1024 * MIB // len(block)):  # 1 GiB, as long as the client reads
            handler.wfile.write(block)

    return answer


@pytest.mark.parametrize("chunked", [False, True])
def test_an_endless_metrics_body_stops_at_the_cap_with_little_memory(chunked):
    with RawServer(endless(chunked)) as server:
        result = run_measured("accept", "--metrics-url", server.url + "/metrics", "--timeout", "30")
    one_line(result, "the answer is larger than 16 MiB")
    assert result.peak_rss < 250 * MIB, result.peak_rss


def test_redirects_elsewhere_are_refused_and_same_host_ones_followed(cli):
    with RawServer(ok(b"")) as other, FakeEngine() as engine:
        elsewhere = other.url.replace("127.0.0.1", "localhost") + "/metrics"
        targets = {
            "/ftp": "ftp://127.0.0.1/metrics",
            "/file": "file:///etc/hostname",
            "/other-host": elsewhere,
            "/same-host": engine.metrics_url,  # another port of the same host: followed
        }

        def redirect(handler) -> None:
            status(handler, "HTTP/1.1 302 Found", {"Location": targets[handler.path], "Content-Length": "0"})

        with RawServer(redirect) as server:
            for path in ("/ftp", "/file", "/other-host"):
                assert_error(
                    cli("accept", "--metrics-url", server.url + path), "only http(s) on the same host is followed"
                )
            followed = cli("accept", "--metrics-url", server.url + "/same-host", "--format", "json")
        assert other.requests == []
        assert followed.returncode == 0, followed.stderr
        assert engine.scrapes == 1


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-5"])
def test_counters_that_are_not_counts_are_bad_data(value, cli):
    with FakeEngine(metrics_body=COUNTERS.format(drafts=value, accepted="10")) as engine:
        assert_error(cli("accept", "--metrics-url", engine.metrics_url), "a counter is a finite number, never negative")
    with FakeEngine(metrics_body=COUNTERS.format(drafts="100", accepted=value)) as engine:
        assert_error(
            cli("accept", "--metrics-url", engine.metrics_url), "vllm:spec_decode_num_accepted_tokens_total is"
        )


@pytest.mark.parametrize(
    "usage",
    [b'{"prompt_tokens": 1e999}', b'{"prompt_tokens": -3}', b'{"prompt_tokens": "12"}', b'{"completion_tokens": 1.5}'],
)
def test_token_counts_past_any_float_are_a_bad_answer(usage, cli, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"hello"\n')
    body = b'{"id": "x", "choices": [], "usage": ' + usage + b"}"
    with FakeEngine() as engine, RawServer(ok(body, "application/json")) as api:
        proc = cli(
            "accept",
            "--metrics-url",
            engine.metrics_url,
            "--prompts",
            str(prompts),
            "--base-url",
            api.url,
            "--model",
            "m",
        )
    assert_error(proc, "none of the 1 prompts was answered")
    assert "answer is not an OpenAI completion" in proc.stderr


def test_a_model_list_nested_deep_is_a_bad_answer(cli, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"hello"\n')
    with FakeEngine() as engine, RawServer(ok(b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")) as api:
        assert_error(
            cli("accept", "--metrics-url", engine.metrics_url, "--prompts", str(prompts), "--base-url", api.url),
            "did not answer an OpenAI model list",
        )


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[32mpresent\x1b[0m\r"


def test_what_the_server_says_is_never_echoed_raw(cli):
    body = ("<html>" + ESCAPES + "x" * 5000 + "</html>\n").encode()
    with RawServer(ok(body)) as server:
        proc = cli("accept", "--metrics-url", server.url + "/metrics")
    assert_error(proc, "did not answer Prometheus text")
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr and "\r" not in proc.stderr
    assert len(proc.stderr) < 400 and "x" * 100 not in proc.stderr
    with RawServer(lambda h: status(h, "HTTP/1.1 500 " + ESCAPES, {"Content-Length": "0"})) as server:
        proc = cli("accept", "--metrics-url", server.url + "/metrics")
    assert_error(proc, "HTTP 500")
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr and "\r" not in proc.stderr
    labels = COUNTERS.format(drafts="5", accepted="5").replace('model_name="m"', 'model_name="' + "\\x1b[2J" + '"')
    with FakeEngine(metrics_body=labels.replace("\\x1b", "\x1b")) as engine:
        proc = cli("accept", "--metrics-url", engine.metrics_url, "--model", "other")
    assert_error(proc, "has no spec-decode counters for model 'other'")
    assert "\x1b" not in proc.stderr


PER_POSITION = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{position}"}} 3\n'


def test_a_position_past_any_speculative_token_is_bad_data_not_a_tuple_of_its_length():
    """position="99999999999" made a tuple of 10^11 counts: now refused at the cap, in little memory."""
    body = (COUNTERS.format(drafts="5", accepted="5") + PER_POSITION.format(position="99999999999")).encode()
    with RawServer(ok(body)) as server:
        result = run_measured(
            "accept", "--metrics-url", server.url + "/metrics", "--timeout", "20", timeout=60, address_space_mb=2048
        )
    one_line(
        result,
        'position="99999999999": a position is a number of speculative tokens, below 1024 (the cap on positions)',
    )
    assert result.peak_rss < 250 * MIB, result.peak_rss


@pytest.mark.parametrize("position", ["\u00b2", "\u0663", "-1", "1024", "0x1"])
def test_a_position_that_is_not_an_ascii_count_is_bad_data(position, cli):
    """ "²" passed str.isdigit() and then int() raised: an internal error."""
    body = COUNTERS.format(drafts="5", accepted="5") + PER_POSITION.format(position=position)
    with FakeEngine(metrics_body=body) as engine:
        assert_error(cli("accept", "--metrics-url", engine.metrics_url), "(the cap on positions)")


def test_a_line_of_120000_labels_is_refused_before_the_quadratic_parser(cli):
    """The issue's input: 1.3 MB, 120,000 labels on one counter line (12 s in prometheus_client's parser)."""
    labels = ",".join(f'l{i}="v"' for i in range(120_000))
    body = COUNTERS.format(drafts="5", accepted="5") + f"vllm:spec_decode_num_drafts_total{{{labels}}} 1\n"
    assert len(body) > 1_300_000
    with FakeEngine(metrics_body=body) as engine:
        assert_error(
            cli("accept", "--metrics-url", engine.metrics_url),
            "a vllm:spec_decode_num_drafts_total line has more than 32 labels (the cap on labels per line)",
        )


def test_other_series_never_reach_the_parser_and_series_lines_are_capped(cli, monkeypatch):
    """Parsing is linear: the parser sees only the spec-decode lines (counted here), at most 10,000 of them."""
    import prometheus_client.parser as parser

    seen = []
    real = parser.text_string_to_metric_families
    monkeypatch.setattr(parser, "text_string_to_metric_families", lambda text: (seen.append(text), real(text))[1])
    wide = ",".join(f'l{i}="v"' for i in range(2000))  # another series, as wide as cache_config_info can get and more
    other = f"# HELP vllm:cache_config_info x\nvllm:cache_config_info{{{wide}}} 1\n" * 200
    with FakeEngine(metrics_body=other + COUNTERS.format(drafts="5", accepted="5")) as engine:
        proc = cli("accept", "--metrics-url", engine.metrics_url, "--format", "json")
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert seen and all(text.count("\n") == 2 and "cache_config_info" not in text for text in seen)
    many = "".join(f'vllm:spec_decode_num_drafts_total{{model_name="m",engine="{i}"}} 1\n' for i in range(10_001))
    with FakeEngine(metrics_body=many) as engine:
        assert_error(
            cli("accept", "--metrics-url", engine.metrics_url),
            "more than 10000 spec-decode sample lines (the cap on series lines)",
        )
