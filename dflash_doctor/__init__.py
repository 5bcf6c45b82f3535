"""dflash-doctor: does this vLLM run DFlash speculative decoding correctly?"""

__version__ = "0.1.0"
