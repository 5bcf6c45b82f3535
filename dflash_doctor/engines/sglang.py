"""SGLang, described (read from its wheels 0.5.10.post1 to 0.5.23)."""

from . import Engine, PlatformKind
from .route import Direct

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
    source_dir="python",  # github.com/sgl-project/sglang keeps the package in python/sglang/ (python/pyproject.toml)
)
