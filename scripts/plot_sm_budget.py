"""The SM-budget curve as an SVG: for each case of sm-budget.json's rows of part "curve"
(benchmarks/probes/sm_budget.py),
GB/s against the SM count, tmakit's (`sms=k`) beside torch's op in a green context of k SMs, and
torch's full-grid op as a level line. Plain SVG, no plotting library.

    python scripts/plot_sm_budget.py benchmarks/results/sm-budget.json benchmarks/results/sm-budget.svg
"""

from __future__ import annotations

import json
import sys

WIDTH, HEIGHT, MARGIN = 360, 240, 40
SERIES = (
    ("tmakit_gbs", "tmakit sms=k", "#1f77b4"),
    ("torch_green_gbs", "torch, green context of k", "#d62728"),
)


def panel(name: str, case: dict, left: int) -> list[str]:
    """One case's axes, lines and labels, `left` pixels from the figure's edge."""
    rows = case["by_sms"]
    most_sms = max(row["sms"] for row in rows)
    values = [row[key] for row in rows for key, _, _ in SERIES if key in row]
    top = max([*values, case.get("torch_full_gbs", 0), case.get("tmakit_full_gbs", 0), 1.0])

    def x(sms: float) -> float:
        return left + MARGIN + (WIDTH - 2 * MARGIN) * sms / most_sms

    def y(gbs: float) -> float:
        return HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * gbs / top

    parts = [
        f'<text x="{left + WIDTH / 2}" y="16" text-anchor="middle" font-size="12">{name}</text>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(most_sms)}" y2="{y(0)}" stroke="black"/>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(0)}" y2="{y(top)}" stroke="black"/>',
        f'<text x="{x(most_sms)}" y="{y(0) + 14}" text-anchor="end" font-size="10">{most_sms} SMs</text>',
        f'<text x="{x(0) - 4}" y="{y(top) + 4}" text-anchor="end" font-size="10">{top:.0f} GB/s</text>',
    ]
    for key, label, colour in SERIES:
        points = " ".join(f"{x(row['sms']):.1f},{y(row[key]):.1f}" for row in rows if key in row)
        if points:
            parts.append(
                f'<polyline fill="none" stroke="{colour}" points="{points}"><title>{label}</title></polyline>'
            )
    if "torch_full_gbs" in case:
        level = y(case["torch_full_gbs"])
        parts.append(
            f'<line x1="{x(0)}" y1="{level:.1f}" x2="{x(most_sms)}" y2="{level:.1f}" stroke="gray" '
            'stroke-dasharray="4 3"><title>torch, every SM</title></line>'
        )
    return parts


def curve_cases(study: dict) -> dict:
    """The study's curve by case: its rows of part "curve" ("by_sms") and its full-grid rates."""
    cases: dict = {}
    for row in study["rows"]:
        if row.get("part") == "curve":
            cases.setdefault(row["case"], {"by_sms": []})["by_sms"].append(row)
    for row in study["rows"]:
        if row.get("part") == "full" and row["case"] in cases:
            cases[row["case"]].update(row)
    return cases


def figure(study: dict) -> str:
    """The SVG of every case of the study's curve, side by side, with a legend."""
    cases = curve_cases(study)
    parts = []
    for i, (name, case) in enumerate(cases.items()):
        parts += panel(name, case, i * WIDTH)
    legend = [(label, colour) for _, label, colour in SERIES] + [("torch, every SM (dashed)", "gray")]
    for i, (label, colour) in enumerate(legend):
        parts.append(
            f'<text x="{10 + 200 * i}" y="{HEIGHT + 14}" fill="{colour}" font-size="11">{label}</text>'
        )
    context = study.get("context", {})
    caption = f"{context.get('device', '?')}, {context.get('date', '?')}, commit {context.get('commit', '?')}"
    parts.append(f'<text x="10" y="{HEIGHT + 32}" font-size="10">{caption}</text>')
    width = WIDTH * len(cases)
    body = "\n".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT + 40}" '
        f'font-family="sans-serif">\n{body}\n</svg>\n'
    )


def main() -> None:
    source, target = sys.argv[1:3]
    with open(source) as file:
        study = json.load(file)
    if not curve_cases(study):
        sys.exit(f"{source} holds no curve (run without --skip-curve)")
    with open(target, "w") as file:
        file.write(figure(study))


if __name__ == "__main__":
    main()
