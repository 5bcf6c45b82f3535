"""Data is never an internal error (issue 20): values of the wrong type, integers past
Python's digit limit or int64, nesting, and host names a resolver refuses, in drafter
configs, waivers, hosts files, SGLang answers and image manifests. Each is one line
naming the value, exit 3."""

from __future__ import annotations

import json

import pytest

from conftest import assert_error, run_cli
from metrics_server import RawServer, ok, status

HUGE = "1" + "0" * 5000  # past Python's 4,300-digit limit: json.loads and tomllib raise ValueError


@pytest.mark.release
def test_a_drafter_config_whose_architectures_is_5_is_bad_data_for_config_and_check(tmp_path, mini_tree):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"architectures": 5, "dflash_config": {"target_layer_ids": [1, 9, 17]}, "num_hidden_layers": 1})
    )
    assert_error(run_cli("config", str(config)), "architectures is 5, not a list of class names")
    assert_error(
        run_cli("check", "--path", str(mini_tree("0.33.0")), "--draft-config", str(config)),
        "architectures is 5, not a list of class names",
    )


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            '{"num_hidden_layers": ' + HUGE + "}",
            "holds an integer too long to be a config value (Exceeds the limit (4300 digits)",
        ),
        (
            '{"dflash_config": {"target_layer_ids": [1, 99999999999999999999999]}}',
            "dflash_config.target_layer_ids[1] is an integer of 23 digits",
        ),
        ('{"a": ' + "[" * 500 + "]" * 500 + "}", "is nested more than 32 levels deep"),
        ("[" * 200_000, "nested too deeply"),
    ],
    ids=["digits", "int64", "nesting", "recursion"],
)
def test_drafter_config_values_past_any_config_are_one_line(text, fragment, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(text)
    assert_error(run_cli("config", str(config)), fragment)


@pytest.mark.release
def test_a_waiver_with_an_integer_past_the_digit_limit_is_one_line(tmp_path, mini_tree):
    waivers = tmp_path / "waivers.toml"
    waivers.write_text(f'[[waiver]]\nid = "cache-drop"\nreason = "r"\nuntil = {HUGE}\n')
    assert_error(
        run_cli("check", "--path", str(mini_tree("0.33.0")), "--waivers", str(waivers)),
        "holds an integer too long to be a waiver value",
    )


@pytest.mark.parametrize(
    "line", ["a" * 64 + ".example", "user@" + "b" * 70 + ":22", "gpu..example", "x\u00e9" + "c" * 70]
)
def test_a_host_a_resolver_refuses_is_one_line_naming_the_line(line, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(f"# fleet\ngpu-1\n{line}  # the bad one\n")
    proc = run_cli("check", "--hosts-file", str(hosts), "--connect-timeout", "1")
    assert_error(proc, f"hosts file {hosts}, line 3: ")
    assert "is not a host name (each dot-separated label is 1 to 63 characters)" in proc.stderr
    assert_error(run_cli("check", "--host", line, "--connect-timeout", "1"), "--host: ")


@pytest.mark.slow
def test_an_sglang_answer_with_an_integer_past_the_digit_limit_is_not_json():
    body = ('{"internal_states": [{"avg_spec_accept_length": ' + HUGE + "}]}").encode()

    def answer(handler) -> None:  # an SGLang server without --enable-metrics: no /metrics
        if handler.path == "/server_info":
            return ok(body, "application/json")(handler)
        status(handler, "HTTP/1.1 404 Not Found", {"Content-Length": "0"})

    with RawServer(answer) as server:
        assert_error(run_cli("accept", "--metrics-url", server.url, "--engine", "sglang"), "did not answer JSON")
