"""The implicit-bias experiment's claims and figures (``docs/theory/implicit-bias.md``): the
theorems' assumptions, the paper's figure settings, :data:`CLAIMS` and :data:`FIGURES`.

Alignment metrics are NaN where the W-SVM was infeasible (``svm_feasible = 0``); the claims
that use them keep ``svm_feasible = 1`` rows only. No torch here.
"""

from __future__ import annotations

from sdyn.analysis.kinds import CurveGeometricRate, CurvePowerLaw, PairedRatio, PowerLaw
from sdyn.api import Assumption, Figure, Panel, PaperFigure
from sdyn.experiments.implicit_bias.config import CHECKPOINTS

PAPER = "implicit bias of self-attention (arXiv 2402.05738)"
_FIXED = ("decoder_trained", 0)
_FEASIBLE = ("svm_feasible", 1)
_OPTIMIZER = "experiment.optimizer"
_ADAPTIVE = ("ngd", "polyak", "ngd_momentum")
# The settings the theorems cover, as the runs record them.
UNCAPPED = Assumption("capped", "==", 0, "the theorems' step rules are uncapped")
ASSUMPTION_1 = Assumption(
    "assumption1", "==", 1, "Assumption 1 (nearly orthogonal tokens)", show="a1_ratio"
)
ASSUMPTION_2 = Assumption(
    "assumption2", "==", 1, "Assumption 2 (equal non-opt token scores)", show="a2_spread"
)
NGD = Assumption(_OPTIMIZER, "==", "ngd", "Thm 1 and Lemma 1 are about NGD")
NGD_OR_POLYAK = Assumption(
    _OPTIMIZER, "in", ("ngd", "polyak"), "the rate is Thm 1's (NGD) and Thm 7's (Polyak)"
)
DATA_MODEL_DM = Assumption("data.name", "==", "dm", "Thms 2-4 assume data model DM")
BY_GRADIENT = Assumption(
    "experiment.normalise", "==", "gradient", "Thm 1's NGD normalises by ||grad L|| (Eq. 2)"
)
EQ_13 = (
    Assumption("experiment.normalise", "==", "loss", "Thms 2-4 normalise by the loss (Eq. 13)"),
    Assumption(
        "experiment.joint_power", "==", 2 / 3, "Thms 2-4 take the time factor (t+1)^-2/3 [derived]"
    ),
)


def _figure_setting(figure: str, decoder_trained: int, values: dict) -> tuple[Assumption, ...]:
    """A paper figure's setting as assumptions on the runs with its decoder: the data model,
    step rules, rates and caps of its sweep (``sdyn/sweeps/implicit_fig2.yaml``, ``..._fig3``;
    the rates and caps were lost from the paper and are sdyn's reconstruction there)."""
    return tuple(
        Assumption(
            column,
            "==",
            value,
            f"{figure} has {column.split('.', 1)[1]} = {value:g}"
            if isinstance(value, float)
            else f"{figure} has {column.split('.', 1)[1]} = {value}",
            when=(("decoder_trained", decoder_trained),),
        )
        for column, value in values.items()
    )


# Sec. 5.1 names Fig. 3's joint NGD "the joint NGD updates (Eq. (2))": joint_eq2. The joint rule
# (Eq. 13 with its time factor) is Thms 2-4's, run beside it, not the figure's.
FIG_3_JOINT = Assumption(
    _OPTIMIZER,
    "!=",
    "joint",
    "Fig. 3's joint NGD is Eq. 2 (joint_eq2), not Eq. 13 with its time factor",
    when=(("decoder_trained", 1),),
)
# The setting of each figure whose orderings the _ordering claims state: Fig. 2 with a fixed
# decoder, Fig. 3 with u trained. Elsewhere their orderings are another experiment.
FIGURE_SETTINGS = (
    _figure_setting(
        "Fig. 2",
        0,
        {
            "data.name": "example1",
            "experiment.normalise": "gradient",
            "experiment.eta_gd": 10.0,
            "experiment.eta_ngd": 0.25,
            "experiment.eta_polyak": 1.0,
            "experiment.momentum": 0.9,
            "experiment.cap_ngd": 1e9,
            "experiment.cap_polyak": 1e11,
        },
    )
    + _figure_setting(
        "Fig. 3",
        1,
        {
            "data.name": "dm",
            "experiment.normalise": "loss",
            "experiment.eta_gd": 0.1,
            "experiment.eta_ngd": 0.1,
            "experiment.eta_polyak": 1.0,
            "experiment.cap_ngd": 1e10,
            "experiment.cap_polyak": 1e10,
        },
    )
    + (FIG_3_JOINT,)
)
FIGURES_2_3 = PaperFigure("Figs. 2-3", FIGURE_SETTINGS)
# Where a figure's ordering is read: the train loss above L* (L itself when u is trained), the
# alignment with W_mm, and -log L (a loss's rate), each with the float64 resolution of the
# paper's quantity relative to its start (the distance comes from a cosine, hence 1e-8).
_ORDERED = {
    "loss": ("excess_loss", "$L - L^*$", 1e-16),
    "alignment": ("w_dist", "alignment distance", 1e-8),
    "log_loss": ("neg_log_loss", r"$-\log L$", None),
}


def _ordering(claim_id: str, metric: str, reference: str, compared: tuple, **kw) -> PairedRatio:
    """A figure's ordering of the step rules: ``metric`` (a key of ``_ORDERED``) of each rule
    in ``compared`` over that of ``reference`` on the same seed (same data, same W_0), at each
    of :data:`CHECKPOINTS` (``kw`` gives statement, source, theory, direction, tolerance).
    The paper states it for its figures only: runs outside :data:`FIGURE_SETTINGS` are outside
    its assumptions."""
    quantity, label, floor = _ORDERED[metric]
    return PairedRatio(
        id=claim_id,
        quantity=quantity,
        axis="seed",
        by=_OPTIMIZER,
        reference=reference,
        matched=("decoder_trained",),  # joint trains u: compared only with rules that do too
        where=(_FEASIBLE, (_OPTIMIZER, (reference, *compared))),
        checkpoints=CHECKPOINTS,
        relative_floor=floor,
        grids=("iters",),
        figure=FIGURES_2_3,
        quantity_label=f"{label} over {reference.upper()}'s",
        note="pairs on seed; a pair with a value float64 cannot resolve (after its run "
        + (f"stopped, or below {floor:g} of its start" if floor else "stopped")
        + ") is dropped at that checkpoint; App. C caps the adaptive steps: the caps and step "
        "sizes are in the figure's caption, and once both rules run at their caps a ratio "
        "of losses is set by the caps' ratio, not by the rules; judged in the figure's "
        "setting only (--sweep implicit_fig2 / implicit_fig3): elsewhere the ordering is "
        "another experiment's",
        **kw,
    )


_FASTER_THAN_GD = (
    f"{PAPER}, Fig. 2 (NGD 'significantly faster than standard GD') and Fig. 3 ('all other "
    "algorithms are faster than GD') (empirical)"
)
_FASTER_THAN_NGD = (
    f"{PAPER}, Fig. 2 (Polyak 'even faster convergence than NGD across all metrics', momentum "
    "'a performance boost') and Fig. 3 ('Polyak step being the fastest') (empirical)"
)


CLAIMS = (
    CurvePowerLaw(
        id="alignment_rate",
        statement="NGD with a fixed decoder: W_t/||W_t|| converges to W_mm/||W_mm|| from any "
        "initial direction, ||W_t/||W_t|| - W_mm/||W_mm|| ||_F = O(t^-1/2)",
        source=f"{PAPER}, Thm 1 (NGD), Thm 7 (Polyak) ([derived] rate t^-1/2: the order was "
        "lost from the text); NGD+momentum side by side (no theorem)",
        quantity="w_dist",
        axis="step",
        theory=-0.5,
        direction="<=",
        where=(_FIXED, _FEASIBLE, (_OPTIMIZER, _ADAPTIVE)),
        assumptions=(NGD_OR_POLYAK, BY_GRADIENT, UNCAPPED, ASSUMPTION_1, ASSUMPTION_2),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        relative_floor=1e-8,  # a distance from a cosine: float64 resolves 1e-8 of its start
        grids=("iters",),
        quantity_label=r"$\|W_t/\|W_t\| - W_{\rm mm}/\|W_{\rm mm}\|\|_F$",
        axis_label="step $t$",
        note="log-log slope over the last decade of steps; the theorem's rate is an upper "
        "bound, so any slope <= -1/2 is consistent; NGD+momentum has no theorem (shown as "
        "outside assumptions)",
    ),
    CurvePowerLaw(
        id="alignment_rate_cos",
        statement="the same alignment in cosine: 1 - cos(W_t, W_mm) = dist^2/2 = O(t^-1)",
        derived_from="alignment_rate",
        source=f"{PAPER}, Thm 1, Thm 7 ([derived]: 1 - cos is half the squared distance)",
        quantity="w_1mcos",
        axis="step",
        theory=-1.0,
        direction="<=",
        where=(_FIXED, _FEASIBLE, (_OPTIMIZER, _ADAPTIVE)),
        assumptions=(NGD_OR_POLYAK, BY_GRADIENT, UNCAPPED, ASSUMPTION_1, ASSUMPTION_2),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        relative_floor=1e-16,
        grids=("iters",),
        quantity_label=r"$1 - \cos(W_t, W_{\rm mm})$",
        axis_label="step $t$",
    ),
    CurvePowerLaw(
        id="alignment_rate_by_n",
        statement="the NGD alignment rate O(t^-1/2) holds at every n (the constants move)",
        source=f"{PAPER}, Thm 1 ([derived] rate t^-1/2)",
        quantity="w_dist",
        axis="step",
        theory=-0.5,
        direction="<=",
        where=(_FIXED, _FEASIBLE, (_OPTIMIZER, "ngd")),
        assumptions=(BY_GRADIENT, UNCAPPED, ASSUMPTION_1, ASSUMPTION_2),
        by="experiment.n",
        window=(0.1, 1.0),
        relative_floor=1e-8,
        grids=("samples",),
        quantity_label=r"$\|W_t/\|W_t\| - W_{\rm mm}/\|W_{\rm mm}\|\|_F$",
        axis_label="step $t$",
    ),
    CurvePowerLaw(
        id="norm_growth",
        statement="under NGD ||W_t|| grows linearly in t",
        source=f"{PAPER}, Eq. 12 / Lemma 7",
        quantity="w_norm",
        axis="step",
        theory=1.0,
        direction="==",
        tolerance=0.05,
        where=(_FIXED, (_OPTIMIZER, "ngd")),
        assumptions=(BY_GRADIENT, UNCAPPED, ASSUMPTION_1, ASSUMPTION_2),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        quantity_label=r"$\|W_t\|_F$",
        axis_label="step $t$",
        note="eta c t <= ||W_t|| <= eta t + ||W_0||: log-log slope 1, within +/- 0.05",
    ),
    CurvePowerLaw(
        id="norm_growth_log",
        statement="under GD ||W_t|| grows only logarithmically: its late log-log slope is at "
        "most 1/4 (NGD: 1)",
        source=f"{PAPER}, Thm 6 ([derived] ||W_t|| ~ log t under GD, "
        "docs/theory/implicit-bias.md#derived-gd-growth)",
        quantity="w_norm",
        axis="step",
        theory=0.25,
        direction="<=",
        where=(_FIXED, (_OPTIMIZER, "gd")),
        assumptions=(ASSUMPTION_1, ASSUMPTION_2),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        grids=("iters",),
        quantity_label=r"$\|W_t\|_F$",
        axis_label="step $t$",
        note="[derived] ||W_t|| = a + c ln t with a >= 0 has d ln||W|| / d ln t = "
        "c/(a + c ln t) <= 1/ln t, at most 1/4 once t >= e^4 (any late window)",
    ),
    CurveGeometricRate(
        id="saturation",
        statement="the attention map sparsifies exponentially fast: 1 - s_opt decays "
        "geometrically in t (contraction per step < 1)",
        source=f"{PAPER}, Lemma 1",
        quantity="one_minus_s_opt",
        axis="step",
        theory=1.0,
        direction="<=",
        where=(_FIXED, (_OPTIMIZER, _ADAPTIVE)),
        assumptions=(NGD, BY_GRADIENT, UNCAPPED, ASSUMPTION_1, ASSUMPTION_2),
        by=_OPTIMIZER,
        grids=("iters",),
        quantity_label=r"$\mathrm{mean}_i\,(1 - s_{i,\mathrm{opt}})$",
        axis_label="step $t$",
        note="[derived] for NGD the rate is exp(-eta_ngd/||W_mm||) (summary "
        "saturation_rate_theory): ||W_t|| = eta_ngd t along W_mm, whose margin is 1/||W_mm||; "
        "[derived] Polyak's rate is exactly exp(-eta_polyak) (1/e = 0.367879 at eta_polyak = 1) "
        "in every seed, and that is real, not an artefact: once one exponential term "
        "c e^{-<a, W>} dominates the excess loss, the step (L - L*)/||g||^2 g with g = -a "
        "(L - L*) raises <a, W> by exactly eta_polyak, so the excess and 1 - s_opt (the same "
        "exponential) shrink by exp(-eta_polyak) per step whatever the data",
    ),
    *(
        _ordering(
            f"{metric}_ahead_of_gd",
            metric,
            "gd",
            ("ngd", "polyak", "ngd_momentum", "joint", "joint_eq2"),
            statement=f"every adaptive rule is ahead of GD: its {metric} over GD's is below 1 "
            "at every checkpoint",
            source=_FASTER_THAN_GD,
            theory=1.0,
            direction="<=",
        )
        for metric in ("loss", "alignment")
    ),
    *(
        _ordering(
            f"{metric}_ahead_of_ngd",
            metric,
            "ngd",
            ("polyak", "ngd_momentum"),
            statement=f"Polyak and NGD+momentum are ahead of NGD: their {metric} over NGD's is "
            "below 1 at every checkpoint",
            source=_FASTER_THAN_NGD,
            theory=1.0,
            direction="<=",
        )
        for metric in ("loss", "alignment")
    ),
    _ordering(
        "joint_loss_like_ngd",
        "log_loss",
        "ngd",
        ("joint", "joint_eq2"),
        statement="joint training's train loss converges at a rate similar to NGD's: "
        "-log L of joint over NGD's within 1 +/- 0.5 at every checkpoint (the band is sdyn's "
        "reading of 'similar'; the paper gives none)",
        source=f"{PAPER}, Fig. 3 ('the train loss converges at a similar rate for NGD and "
        "joint-NGD') (empirical)",
        theory=1.0,
        direction="==",
        tolerance=0.5,
    ),
    _ordering(
        "joint_alignment_behind_ngd",
        "alignment",
        "ngd",
        ("joint", "joint_eq2"),
        statement="NGD is (slightly) faster than joint training in the other metrics: joint's "
        "alignment distance over NGD's is at least 1 at every checkpoint",
        source=f"{PAPER}, Fig. 3 ('for the other metrics, NGD is slightly faster compared to "
        "joint-NGD') (empirical)",
        theory=1.0,
        direction=">=",
    ),
    CurvePowerLaw(
        id="joint_loss",
        statement="joint (u, W) training: the loss decays like exp(-t^1/3), i.e. -log L grows "
        "at least like t^1/3",
        source=f"{PAPER}, Thm 2 ([derived] rate and step rule of Eq. 13)",
        quantity="neg_log_loss",
        axis="step",
        theory=1 / 3,
        direction=">=",
        where=((_OPTIMIZER, "joint"),),
        assumptions=(DATA_MODEL_DM, *EQ_13, UNCAPPED),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        grids=("iters",),
        quantity_label="$-\\log L(t)$",
        axis_label="step $t$",
        note="Thms 2-4 assume data model DM (data=dm, sweep implicit_fig3)",
    ),
    CurvePowerLaw(
        id="joint_alignment",
        statement="joint training: W_t/||W_t|| still converges to W_mm/||W_mm||, more slowly "
        "than under NGD alone ([derived] about 1/log t): the alignment distance decays late "
        "(log-log slope <= 0)",
        source=f"{PAPER}, Thm 3",
        quantity="w_dist",
        axis="step",
        theory=0.0,
        direction="<=",
        where=((_OPTIMIZER, "joint"), _FEASIBLE),
        assumptions=(DATA_MODEL_DM, *EQ_13, UNCAPPED),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        grids=("iters",),
        quantity_label=r"$\|W_t/\|W_t\| - W_{\rm mm}/\|W_{\rm mm}\|\|_F$",
        axis_label="step $t$",
        note="log-log slope over the last decade of steps; a 1/log t decay has slope -1/ln t "
        "there (about -0.1), so the bound checks the direction only",
    ),
    CurvePowerLaw(
        id="joint_u_margin",
        statement="joint training: the normalised u margin tends to a constant fraction of the "
        "u-SVM margin: positive, and not decaying late (log-log slope >= 0, tolerance 0.05)",
        source=f"{PAPER}, Thm 4",
        quantity="u_margin_ratio",
        axis="step",
        theory=0.0,
        direction=">=",
        tolerance=0.05,
        where=((_OPTIMIZER, "joint"),),
        assumptions=(DATA_MODEL_DM, *EQ_13, UNCAPPED),
        by=_OPTIMIZER,
        window=(0.1, 1.0),
        grids=("iters",),
        quantity_label=r"$\min_i y_i u_t^\top x_{\rm opt} / \|u_t\|$ over $1/\|u_{\rm mm}\|$",
        axis_label="step $t$",
        note="non-positive margins are excluded from the log fit and counted",
    ),
    PowerLaw(
        id="wmm_norm_vs_n",
        statement="||W_mm|| grows at most like n^1/2 (nearly orthogonal constraints add in "
        "quadrature; shared directions make it smaller)",
        source=f"{PAPER}, W-SVM (§2) under Assumption 1 ([derived] scaling)",
        quantity="wmm_norm",
        axis="experiment.n",
        theory=0.5,
        direction="<=",
        where=(_FEASIBLE, (_OPTIMIZER, "ngd")),
        assumptions=(ASSUMPTION_1,),
        grids=("samples",),
        quantity_label=r"$\|W_{\rm mm}\|_F$",
        axis_label="sequences $n$",
    ),
)
_RULES_SHOWN = tuple(
    f"experiment.{key}"
    for key in ("eta_gd", "eta_ngd", "normalise", "eta_polyak", "cap_ngd", "cap_polyak")
)
_LOSS = Panel("loss", "train loss $L$", references=(("loss_star", "$L^*$"),))
_SCORE = Panel("s_opt", "mean opt softmax score", log=False)
_W_NORM = Panel("w_norm", r"$\|W_t\|$")
# The alignment distance of Thm 1, with bars for directions (W / ||W||).
_W_ALIGN = Panel("w_dist", r"$\|\bar W_t - \bar W_{\rm mm}\|$", relative_floor=1e-8)
# Fig. 2 (fixed decoder, Example 1) and Fig. 3 (u trained, data model DM), panel by panel.
FIGURES = (
    Figure(
        name="fig2",
        title="Fig. 2: W trained, decoder u fixed",
        panels=(_LOSS, _W_NORM, _SCORE, _W_ALIGN),
        line_by=_OPTIMIZER,
        lines=(
            ("gd", "GD"),
            ("ngd", "NGD"),
            ("ngd_momentum", "NGD + momentum"),
            ("polyak", "Polyak"),
        ),
        where=(_FIXED,),
        at_middle="experiment.n",
        settings=(*_RULES_SHOWN, "experiment.momentum"),
    ),
    Figure(
        name="fig3",
        title="Fig. 3: u and W trained jointly",
        panels=(
            _LOSS,
            _W_NORM,
            Panel("u_norm", r"$\|u_t\|$"),
            _SCORE,
            _W_ALIGN,
            Panel("u_dist", r"$\|\bar u_t - \bar u_{\rm mm}\|$", relative_floor=1e-8),
        ),
        line_by=_OPTIMIZER,
        lines=(
            ("gd", "GD"),
            ("ngd", "NGD"),
            ("polyak", "Polyak"),
            ("joint", "joint NGD (Eq. 13)"),
            ("joint_eq2", "joint NGD (Eq. 2)"),
        ),
        where=(("decoder_trained", 1),),
        at_middle="experiment.n",
        settings=(*_RULES_SHOWN, "experiment.joint_power"),
    ),
)
