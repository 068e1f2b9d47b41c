"""sdyn: sweeps and scaling-law fits for the training dynamics of softmax models."""

from importlib.metadata import version

__version__ = version("sdyn")
