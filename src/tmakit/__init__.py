"""tmakit: Hopper TMA tile-movement kernels in CuTe DSL, verified, timed and explained."""

from .api import config_for, copy, copy_, load_tiles, padded_empty
from .config import SEED, LoadConfig
from .errors import TmaConfigError
from .plan import LoadPlan

__all__ = [
    "SEED",
    "LoadConfig",
    "LoadPlan",
    "TmaConfigError",
    "config_for",
    "copy",
    "copy_",
    "load_tiles",
    "padded_empty",
]
__version__ = "0.1.0"
