"""SGLang, described (read from its wheels 0.5.10.post1 to 0.5.23)."""

from . import Engine, PlatformKind
from .route import Direct
from .metrics import Metrics, ServerInfo

SGLANG = Engine(
    name="sglang",
    display="SGLang",
    package="sglang",
    distribution="sglang",
    # setuptools-scm's file: __version__, and __commit_id__ (None in the wheels on the package index).
    version_file="sglang/_version.py",
    commit_names=("__commit_id__",),
    # sglang/srt/plugins/__init__.py (from 0.5.11): platform and general plugins, loaded at start.
    plugin_groups=("sglang.srt.platforms", "sglang.srt.plugins"),
    # What sglang.srt.utils answers is_<name>() for; the words of a vendor build's name or local label.
    platforms=(
        PlatformKind("cuda", "CUDA", r"cu\d*|cuda"),
        PlatformKind("hip", "ROCm", r"rocm\d*|hip"),
        PlatformKind("npu", "Ascend NPU", "npu|ascend"),
        PlatformKind("cpu", "CPU", "cpu"),
        PlatformKind("xpu", "XPU", "xpu"),
        PlatformKind("hpu", "HPU", "hpu|gaudi"),
        PlatformKind("musa", "MUSA", "musa"),
    ),
    default_platform="cuda",
    report_key="sglang",
    cache="sglang",  # sglang/releases/<version>/, sglang/matrix/
    first_dflash="0.5.11",  # sglang/srt/models/dflash.py and SpeculativeAlgorithm.DFLASH; absent in 0.5.10.post1
    # The model loader builds the drafter's hf_config (transformers' AutoConfig for a qwen3 drafter) and
    # constructs the drafter's model class with it as ``config`` (DFlashDraftModel(config, quant_config, prefix)).
    direct=Direct(parameter="config"),
    # Read from the wheels 0.5.11-0.5.23, sglang/srt/observability/metrics_collector.py and the tokenizer manager:
    # TokenizerMetricsCollector.observe_one_finished_request adds a finished request's completion tokens to
    # sglang:generation_tokens_total and its verify steps to sglang:spec_verify_calls_total (from 0.5.13; absent in
    # 0.5.11 and 0.5.12), labels model_name, engine_type (+ is_streaming on the token counters in 0.5.23); SGLang's
    # own per-request accept length is completion_tokens / spec_verify_ct, the bonus token included. The gauge
    # sglang:spec_accept_length is accepted tokens / forward steps of the last decode-log interval
    # (--decode-log-interval, 40 steps by default), per scheduler (labels tp_rank, pp_rank, ...). /server_info: the
    # server args at the top level (dataclasses.asdict in 0.5.11, ServerArgs.resolved_dict in 0.5.23) and
    # internal_states[i].avg_spec_accept_length, the running average since the start (reset by set_internal_state).
    metrics=Metrics(
        prefix="sglang:",
        drafts="sglang:spec_verify_calls",
        accepted="sglang:generation_tokens",
        bonus_counted=True,
        prompt_sum="sglang:prompt_tokens_total",
        prompt_count="sglang:num_requests_total",
        model_label="model_name",
        at_finish=True,
        gauge="sglang:spec_accept_length",
        gauge_span="the last decode-log interval of each scheduler (--decode-log-interval, 40 decode steps by default)",
        server_info=ServerInfo(
            path="/server_info",
            states="internal_states",
            average="avg_spec_accept_length",
            algorithm="speculative_algorithm",
            block="speculative_num_draft_tokens",
            drafter="speculative_draft_model_path",
            version="version",
            average_span="everything since the server started (or since its internal state was last set)",
        ),
    ),
    # lmsysorg/sglang images: `pip install -e "python[all]"` in /sgl-workspace/sglang (the tree: its python/)
    checkouts=("sgl-workspace",),
    source_dir="python",  # github.com/sgl-project/sglang keeps the package in python/sglang/ (python/pyproject.toml)
    # python/pyproject.toml, as the wheels' METADATA from 0.5.11 shows, pins transformers in [project] dependencies
    checkout_requirements="pyproject.toml",
)
