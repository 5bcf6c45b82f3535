"""A real HTTP server on 127.0.0.1 that stands in for a serving engine in the
accept tests: ``/metrics`` produced by prometheus_client under vLLM's names and
labels, an OpenAI-compatible ``/v1`` whose requests advance the counters, and
SGLang's ``/server_info``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import prometheus_client

import tiers

POSITIONS = 15  # num_speculative_tokens of a block-16 drafter


def geometric(q: float, positions: int = POSITIONS) -> tuple[float, ...]:
    """Per-position acceptance rates q, q^2, ...: mean acceptance length 1 + sum."""
    return tuple(round(q ** (p + 1), 3) for p in range(positions))


HEALTHY = geometric(0.86)  # acceptance length 6.50
OFFSET_LIKE = geometric(0.84)  # 5.87: about 10% below the published 6.55
DEGRADED = geometric(0.78)  # 4.40: a third below
COLLAPSED = (0.15, 0.02, 0.01) + (0.0,) * (POSITIONS - 3)  # 1.18, as on the seed deployment


def acceptance_length(rates: tuple[float, ...]) -> float:
    return 1 + sum(rates)


class FakeEngine:
    """Counters per served model (labels model_name, engine, position as vLLM
    registers them). ``on_scrape(engine, n)`` runs before the n-th scrape
    (from 1) is answered; by default it advances every model by one step."""

    def __init__(
        self,
        profiles: dict[str, tuple[float, ...]] | None = None,
        engines: int = 2,
        drafts_per_step: int = 1000,
        drafts_per_request: int = 60,
        prompt_tokens: int = 180,
        on_scrape: Callable[["FakeEngine", int], None] | None = None,
        expose_created: bool = True,
        metrics_status: int = 200,
        fail_from_scrape: int = 1,
        metrics_body: str | None = None,
        server_info: dict | None = None,
        slow_seconds: float = 0.0,
        request_seconds: float = 0.0,
    ) -> None:
        tiers.require("slow", "starts a metrics server")
        self.profiles = profiles if profiles is not None else {"m": HEALTHY}
        self.engines = engines
        self.drafts_per_step = drafts_per_step
        self.drafts_per_request = drafts_per_request
        self.prompt_tokens = prompt_tokens
        self.on_scrape = on_scrape or (lambda engine, n: engine.step())
        self.expose_created = expose_created
        self.metrics_status = metrics_status  # answered from scrape number fail_from_scrape on
        self.fail_from_scrape = fail_from_scrape
        self.metrics_body = metrics_body
        self.server_info = server_info
        self.slow_seconds = slow_seconds  # for prompts that contain "slow"
        self.request_seconds = request_seconds
        self.requests: list[tuple[str, dict]] = []
        self.scrapes = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.restart()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    # -- counters --------------------------------------------------------
    def restart(self) -> None:
        """A new process: a fresh registry, every counter from zero."""
        self.registry = prometheus_client.CollectorRegistry()
        labels = ["model_name", "engine"]

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> prometheus_client.Counter:
            return prometheus_client.Counter(name, doc, labels + list(extra), registry=self.registry)

        self.drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        self.per_pos = counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", ("position",)
        )
        self.prompt_histogram = prometheus_client.Histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            labels,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000),
            registry=self.registry,
        )
        prometheus_client.Counter(
            "vllm:request_success", "Finished requests.", labels + ["finished_reason"], registry=self.registry
        )
        for model in self.profiles:  # vLLM creates every series at start-up, at 0
            for engine in range(self.engines):
                for metric in (self.drafts, self.draft_tokens, self.accepted, self.prompt_histogram):
                    metric.labels(model, str(engine))
                for position in range(len(self.profiles[model])):
                    self.per_pos.labels(model, str(engine), str(position))

    def step(self, model: str | None = None, drafts: int | None = None, prompt_tokens: int | None = None) -> None:
        """Drafts with the model's per-position rates, spread over the engines."""
        for name in [model] if model else list(self.profiles):
            rates = self.profiles[name]
            per_engine = (drafts or self.drafts_per_step) // self.engines
            for engine in range(self.engines):
                labels = (name, str(engine))
                self.drafts.labels(*labels).inc(per_engine)
                self.draft_tokens.labels(*labels).inc(per_engine * len(rates))
                accepted = [round(per_engine * rate) for rate in rates]
                for position, count in enumerate(accepted):
                    self.per_pos.labels(*labels, str(position)).inc(count)
                self.accepted.labels(*labels).inc(sum(accepted))
                self.prompt_histogram.labels(*labels).observe(prompt_tokens or self.prompt_tokens)

    def exposition(self) -> bytes:
        text = prometheus_client.generate_latest(self.registry).decode()
        if not self.expose_created:
            text = "".join(line + "\n" for line in text.splitlines() if "_created" not in line)
        return text.encode()

    # -- server ------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    def __enter__(self) -> "FakeEngine":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(engine: FakeEngine):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def do_GET(self) -> None:
            if self.path == "/metrics":
                with engine.lock:
                    engine.scrapes += 1
                    status = engine.metrics_status if engine.scrapes >= engine.fail_from_scrape else 200
                    if status == 200 and engine.metrics_body is None:
                        engine.on_scrape(engine, engine.scrapes)
                        body = engine.exposition()
                if status != 200:
                    return self._send(status, b"Internal Server Error", "text/plain")
                if engine.metrics_body is not None:
                    return self._send(200, engine.metrics_body.encode(), "text/html")
                return self._send(200, body, prometheus_client.CONTENT_TYPE_LATEST)
            if self.path == "/v1/models":
                return self._json(
                    200, {"object": "list", "data": [{"id": name, "object": "model"} for name in engine.profiles]}
                )
            if self.path in ("/server_info", "/get_server_info") and engine.server_info is not None:
                return self._json(200, engine.server_info)
            self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self._json(404, {"detail": "Not Found"})
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with engine.lock:
                engine.requests.append((self.path, body))
                engine.in_flight += 1
                engine.max_in_flight = max(engine.max_in_flight, engine.in_flight)
            known = body.get("model") in engine.profiles
            if known:
                time.sleep(engine.slow_seconds if "slow" in json.dumps(body) else engine.request_seconds)
            with engine.lock:
                if known:
                    engine.step(body["model"], engine.drafts_per_request, engine.prompt_tokens)
                # before answering: the client may send its next request as soon as it has the answer
                engine.in_flight -= 1
            if not known:
                return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
            usage = {
                "prompt_tokens": engine.prompt_tokens,
                "completion_tokens": 100,
                "total_tokens": engine.prompt_tokens + 100,
            }
            self._json(
                200,
                {"id": "cmpl-1", "object": "text_completion", "model": body["model"], "choices": [], "usage": usage},
            )

    return Handler


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RawServer:
    """A real HTTP server on 127.0.0.1 whose answers a test writes byte by byte,
    as a hostile peer would: ``answer(handler)`` writes to ``handler.wfile``
    whatever it likes (status line included) for every GET and POST."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        tiers.require("slow", "starts an HTTP server")
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self) -> None:
                server.requests.append(f"{self.command} {self.path}")
                if self.headers.get("Content-Length"):
                    self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    answer(self)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up: as it should
                    pass
                self.close_connection = True

            do_GET = do_POST = _answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "RawServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def status(handler: BaseHTTPRequestHandler, line: str, headers: dict[str, str], body: bytes = b"") -> None:
    """Write a raw answer: the status line, the headers, the body, as given."""
    handler.wfile.write(line.encode("latin-1") + b"\r\n")
    for name, value in headers.items():
        handler.wfile.write(f"{name}: {value}\r\n".encode("latin-1"))
    handler.wfile.write(b"\r\n" + body)
    handler.wfile.flush()


def ok(body: bytes, content_type: str = "text/plain") -> Callable[[BaseHTTPRequestHandler], None]:
    return lambda h: status(
        h, "HTTP/1.1 200 OK", {"Content-Type": content_type, "Content-Length": str(len(body))}, body
    )
