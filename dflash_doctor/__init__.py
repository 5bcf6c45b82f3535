"""dflash-doctor: does this vLLM or SGLang run DFlash speculative decoding correctly?"""

__version__ = "0.1.0"
