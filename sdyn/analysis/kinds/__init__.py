"""sdyn's claim kinds: each a subclass of :class:`sdyn.api.Claim` that owns its fields, its
evidence rule, its fit, its judgment and its plot (see each class).

==========================  =================================================================
kind                        what it measures
==========================  =================================================================
``power_law``               a summary quantity's exponent along a swept axis
``threshold_power_law``     the exponent of an interval-censored threshold along an axis
``bound``                   a per-run bound: the share of runs above it
``curve_power_law``         a recorded curve's exponent in the step
``curve_geometric_rate``    a recorded curve's contraction per step, pooled over runs
``per_run_geometric_rate``  the same, run by run, each in its own window
``paired_ratio``            one setting over a reference setting, paired on a column
``geometric_mean``          a curve's value at checkpoints, over the runs
``column_ratio``            a quantity over another column of the same run
==========================  =================================================================

A plugin's own kind is a subclass of :class:`KindBase` (the standard rules every kind here
builds on) or of one of these, in the plugin's module, with a ``kind`` name of its own: it
registers itself in :data:`sdyn.api.KINDS` and is judged like these. Importing this package
stays cheap (no pandas, scipy or matplotlib until a claim is measured or drawn).
"""

from sdyn.analysis.kinds.base import KindBase
from sdyn.analysis.kinds.bound import Bound
from sdyn.analysis.kinds.column_ratio import ColumnRatio
from sdyn.analysis.kinds.curve_power_law import CurvePowerLaw
from sdyn.analysis.kinds.geometric_mean import GeometricMean
from sdyn.analysis.kinds.geometric_rate import CurveGeometricRate, PerRunGeometricRate
from sdyn.analysis.kinds.paired_ratio import PairedRatio
from sdyn.analysis.kinds.power_law import PowerLaw
from sdyn.analysis.kinds.threshold import ThresholdPowerLaw

__all__ = [
    "Bound",
    "ColumnRatio",
    "CurveGeometricRate",
    "CurvePowerLaw",
    "GeometricMean",
    "KindBase",
    "PairedRatio",
    "PerRunGeometricRate",
    "PowerLaw",
    "ThresholdPowerLaw",
]
