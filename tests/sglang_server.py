"""A real HTTP server on 127.0.0.1 that stands in for an SGLang server in the accept
tests. Its exposition is written here under SGLang's names and labels, with
prometheus_client (the library SGLang's TokenizerMetricsCollector registers them
with), read from the wheels 0.5.11-0.5.23: the counters
``sglang:spec_verify_calls_total`` and ``sglang:generation_tokens_total`` advance when
a request finishes (labels model_name, engine_type; + is_streaming on the token
counters), exist only once a request has finished, and are absent before 0.5.13; the
gauge ``sglang:spec_accept_length`` holds the last decode-log interval per scheduler;
``/server_info`` carries the launch arguments at the top level and
``internal_states[i].avg_spec_accept_length``."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import prometheus_client

import tiers

BLOCK = 16  # --speculative-num-draft-tokens of a block-16 drafter


class FakeSglang:
    """``length``: tokens per verify step of the traffic (the acceptance length). ``counters``:
    whether the release has the verify counter (0.5.13 on); ``metrics``: --enable-metrics;
    ``gauge``: the value its scheduler last logged (None: not logged yet); ``average``: the
    running average of /server_info (None: no verify step yet)."""

    def __init__(
        self,
        length: float = 6.4,
        counters: bool = True,
        metrics: bool = True,
        gauge: float | None = None,
        average: float | None = None,
        algorithm: str | None = "DFLASH",
        drafter: str = "/models/z-lab/Qwen3-8B-DFlash-b16",
        info: dict | None = None,
        body: str | None = None,
        requests_per_scrape: int = 0,
    ) -> None:
        tiers.require("slow", "starts an SGLang stand-in")
        self.length = length
        self.counters = counters
        self.metrics = metrics
        self.average = average
        self.algorithm = algorithm
        self.drafter = drafter
        self.info = info
        self.body = body
        self.requests_per_scrape = requests_per_scrape
        self.scrapes = 0
        self.lock = threading.Lock()
        self.registry = prometheus_client.CollectorRegistry()
        labels = ["model_name", "engine_type"]
        self.generation = prometheus_client.Counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            labels + ["is_streaming"],
            registry=self.registry,
        )
        self.prompt = prometheus_client.Counter(
            "sglang:prompt_tokens",
            "Number of prefill tokens processed.",
            labels + ["is_streaming"],
            registry=self.registry,
        )
        self.requests = prometheus_client.Counter(
            "sglang:num_requests", "Number of requests processed.", labels + ["is_streaming"], registry=self.registry
        )
        self.verify = prometheus_client.Counter(
            "sglang:spec_verify_calls",
            "Number of speculative decoding verification calls.",
            labels,
            registry=self.registry,
        )
        self.gauge = prometheus_client.Gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            labels + ["tp_rank", "pp_rank", "moe_ep_rank"],
            registry=self.registry,
        )
        if gauge is not None:
            self.gauge.labels("m", "unified", "0", "0", "0").set(gauge)
        prometheus_client.Gauge(
            "sglang:num_running_reqs", "The number of running requests.", labels, registry=self.registry
        ).labels("m", "unified").set(0)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def finish(self, requests: int = 10, verify_per_request: int = 50, prompt_tokens: int = 200) -> None:
        """Requests finishing, as observe_one_finished_request counts them."""
        for _ in range(requests):
            self.generation.labels("m", "unified", "false").inc(round(verify_per_request * self.length))
            self.prompt.labels("m", "unified", "false").inc(prompt_tokens)
            self.requests.labels("m", "unified", "false").inc()
            if self.counters:
                self.verify.labels("m", "unified").inc(verify_per_request)

    def server_info(self) -> dict:
        if self.info is not None:
            return self.info
        state = {"last_gen_throughput": 120.0, "memory_usage": {"weight": 16.0}}
        if self.average is not None:
            state["avg_spec_accept_length"] = self.average
        return {
            "model_path": "Qwen/Qwen3-8B",
            "speculative_algorithm": self.algorithm,
            "speculative_draft_model_path": self.drafter,
            "speculative_num_draft_tokens": BLOCK,
            "decode_log_interval": 40,
            "enable_metrics": self.metrics,
            "internal_states": [state],
            "version": "0.5.23",
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "FakeSglang":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(server: FakeSglang):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/metrics" and server.metrics:
                with server.lock:
                    server.scrapes += 1
                    if server.scrapes > 1 and server.requests_per_scrape:
                        server.finish(server.requests_per_scrape)
                    body = (
                        server.body.encode()
                        if server.body is not None
                        else prometheus_client.generate_latest(server.registry)
                    )
                return self._send(200, body, prometheus_client.CONTENT_TYPE_LATEST)
            if self.path == "/server_info":
                return self._send(200, json.dumps(server.server_info()).encode(), "application/json")
            if self.path == "/v1/models":
                return self._send(200, json.dumps({"data": [{"id": "m"}]}).encode(), "application/json")
            self._send(404, b'{"detail":"Not Found"}', "application/json")

        def do_POST(self) -> None:
            """An OpenAI-compatible request: answered once it has finished (and been counted)."""
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self._send(404, b'{"detail":"Not Found"}', "application/json")
            with server.lock:
                server.finish(1)
            usage = {"prompt_tokens": 200, "completion_tokens": 320, "total_tokens": 520}
            self._send(200, json.dumps({"id": "1", "choices": [], "usage": usage}).encode(), "application/json")

    return Handler
