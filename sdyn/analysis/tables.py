"""A claim table as text: one row per measured claim (:func:`summary_table`), as Markdown and
as a booktabs LaTeX table, with the legend of its verdicts and their counts."""

from __future__ import annotations

import math
import re
from collections import Counter

import pandas as pd

from sdyn.analysis.claims import ClaimResult
from sdyn.analysis.kinds.bound import POWER_LIMIT
from sdyn.analysis.verdict import VERDICTS, shown


def fmt_number(x: float) -> str:
    """``x`` to three significant digits; nan and infinities as Python writes them."""
    return f"{x:.3g}" if math.isfinite(x) else str(x)  # nan, inf, -inf


# The table's column of fitted values: each with its interval, named where it is not a 95% CI
# (a bracket, an exact value).
FITTED = "fitted [interval]"


def summary_table(results: list[ClaimResult]) -> pd.DataFrame:
    """One row per measured claim: claim, fitted value [interval], theory, verdict, slack (the
    room the bound leaves, :func:`sdyn.analysis.verdict.slack`; blank for a prediction),
    reason, points, runs, source (claims the sweep does not measure are listed apart, see
    :func:`sdyn.analysis.report.write`)."""
    return pd.DataFrame(
        [
            {
                "claim": r.label,
                FITTED: shown(r.fit, r.interval),
                "theory": f"{r.claim.direction} {fmt_number(r.theory)}",
                "verdict": r.verdict,
                "slack": r.slack.text if r.slack else "",
                "reason": r.reason,
                "points": r.fit.n_points,
                "runs": r.n_runs,
                "source": r.claim.source,
            }
            for r in results
            if r.measured
        ],
        columns=["claim", FITTED, "theory", "verdict", "slack", "reason", "points"]
        + ["runs", "source"],
    )


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a GitHub Markdown table, each ``|`` inside a cell escaped (a norm such as
    ``||H(t) - H(0)||_F`` would otherwise split its cell)."""
    escaped = table.map(lambda v: v.replace("|", r"\|") if isinstance(v, str) else v)
    return escaped.to_markdown(index=False)


LATEX_RELATIONS = {"<=": r"$\leq$", ">=": r"$\geq$", "==": "$=$"}


def _latex_numbers(line: str) -> str:
    """Numbers in a table row as math: ``1e-05`` -> ``$1\\times10^{-5}$``, a slack's
    ``10^27.6`` -> ``$10^{27.6}$``, a minus sign as ``$-$`` (not a hyphen), ``inf`` as
    ``$\\infty$``; a break allowed after each underscore (long claim names wrap)."""
    line = re.sub(r"10\\textasciicircum (-?\d+(?:\.\d+)?)", r"$10^{\1}$", line)
    line = line.replace("\\_", "\\_\\allowbreak{}")
    line = re.sub(
        r"(?<![\w.])(-?)(\d+(?:\.\d+)?)e([+-]?\d+)\b",
        lambda m: f"${m[1]}{m[2]}\\times10^{{{int(m[3])}}}$",
        line,
    )
    line = re.sub(r"(?<![\w.$])-inf\b", r"$-\\infty$", line)
    line = re.sub(r"(?<![\w.$-])inf\b", r"$\\infty$", line)
    return re.sub(r"(?<![\w.${])-(?=\d)", "$-$", line)


def latex_table(table: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs LaTeX table (``\\usepackage{booktabs}``) of a claim table, to ``\\input``;
    ``caption`` is LaTeX (see :func:`latex_escape`), ``label`` its ``\\label``.

    Text is escaped; numbers, minus signs and the theory's relation are typeset in math mode;
    small type and narrow column gaps keep a seven-column claim table within an article's
    column (checked with pdflatex: no overfull box).
    """
    # Wrapping columns for the claim, the interval, the verdict and the slack; the rest as wide
    # as needed (with the runs, about 330 pt: an article's text width is 345 pt).
    wide = {
        "claim": "p{8.2em}",
        FITTED: "p{7.5em}",
        "verdict": "p{5.3em}",
        "slack": "p{6.6em}",
    }
    columns = "".join(wide.get(c, "l" if table[c].dtype == object else "r") for c in table)
    tex = table.to_latex(
        index=False, escape=True, caption=caption, label=label, column_format=columns
    )
    head, _, rest = tex.partition("\\midrule\n")
    body, _, tail = rest.partition("\\bottomrule\n")
    body = "\n".join(_latex_numbers(line) for line in body.splitlines()) + "\n"
    tex = f"{head}\\midrule\n{body}\\bottomrule\n{tail}"
    for text, math_ in LATEX_RELATIONS.items():
        tex = tex.replace(f" {text} ", f" {math_} ")
    tex = tex.replace("\\begin{tabular}", "\\small\\setlength{\\tabcolsep}{3pt}\n\\begin{tabular}")
    return tex


def latex_label(*parts: str) -> str:
    """A ``\\label`` key from a sweep's name and more (``tab:sdyn:<sweep>``), characters
    LaTeX and hyperref accept."""
    return "tab:sdyn:" + ":".join(re.sub(r"[^A-Za-z0-9.+-]", "-", p) for p in parts)


VERDICT_LEGEND = (
    "consistent / violated: the 95% interval lies within / outside what the theorem allows; "
    f"consistent (vacuous): a per-run bound every run meets by more than a factor "
    f"{1 / POWER_LIMIT:.0e} (the check could not have failed: no evidence for the theorem); "
    "inconclusive: it straddles the bound, the evidence is too thin, or a rate is still "
    "changing across its window; outside assumptions: "
    "the runs are not in the setting the theorem (or the paper's figure) covers (the measured "
    "value is shown, the theorem is not judged); not measured: the sweep does not vary what "
    "the claim is about, no value resolves, or a curve does not move over its window (no rate "
    "to fit); derived: the claim restates another claim's evidence (not a second verdict); "
    "an interval is a 95% CI unless named otherwise: a bracket (a threshold law whose sigma the "
    "grid cannot identify), exact (every run agrees to float64 resolution), or a plugin's own "
    "method at no stated level; slack: the room a bound "
    "leaves, as a difference (exponents, rates), a factor (ratios) or decades (per-run "
    "bounds), with its interval (none where the runs are outside the assumptions: the bound "
    "is not judged)"
)


def verdict_counts(results: list[ClaimResult]) -> str:
    """One line: how many measured claims got each verdict, in :data:`VERDICTS` order, e.g.
    ``"verdicts: 4 consistent, 2 consistent (vacuous)"`` (vacuous checks counted apart)."""
    counts = Counter(r.verdict for r in results if r.measured)
    parts = [f"{counts[v]} {v}" for v in VERDICTS if counts[v]]
    return "verdicts: " + (", ".join(parts) if parts else "none")


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (for captions)."""
    special = {c: f"\\{c}" for c in "&%$#_{}"}
    special.update(
        {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}
    )
    special.update({"<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"})
    return "".join(special.get(c, c) for c in text)
