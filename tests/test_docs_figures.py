"""The drop-in and host-cost figures the READMEs quote are their results files', as rounded there
(a figure written by hand drifts from the file it came from)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def span(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}x"


def test_the_drop_in_figures_are_the_studys():
    rows = json.loads((RESULTS / "dropin.json").read_text())["rows"]

    def ratios(prefix: str, key: str = "device_vs_faster_peer") -> list[float]:
        return [row[key] for row in rows if row["case"].startswith(prefix)]

    layers = [row for row in rows if row["case"].startswith("im2col") and "3x3" in row["case"]]
    stem = next(row for row in rows if "7x7" in row["case"])
    add_1 = next(row for row in rows if row["case"].startswith("add 1 MiB"))
    readme = " ".join((ROOT / "README.md").read_text().split())
    large_transposes = [
        row for row in rows if row["case"].startswith("transpose ") and "1 MiB" not in row["case"]
    ]
    assert (
        f"transposing copies {span(ratios('transpose '))}, im2col on ResNet-50's 3x3 layers "
        f"{span([row['device_vs_faster_peer'] for row in layers])}, "
        f"same-layout copies {span(ratios('copy '))}, "
        f"`add_` {add_1['device_vs_faster_peer']:.2f}x at 1 MiB"
    ) in readme
    assert f"is {span([row['eager_vs_torch'] for row in large_transposes])} torch's `copy_`" in readme
    assert f"ran {span([row['device_vs_faster_peer'] for row in layers])} faster" in readme
    assert (
        f"{span([row['eager_vs_torch'] for row in layers], 1)} faster than that expression eagerly" in readme
    )
    assert f"the 7x7 stem {stem['device_vs_faster_peer']:.2f}x inductor" in readme
    figures = (ROOT / "benchmarks" / "README.md").read_text()
    assert (
        f"copy {span(ratios('copy '))}, transposing {span(ratios('transpose '))}, "
        f"`add_` {add_1['device_vs_faster_peer']:.2f}x at 1 MiB"
    ) in figures
    assert f"im2col {span([row['device_vs_faster_peer'] for row in layers])} on the 3x3 layers" in figures
    assert f"and {stem['device_vs_faster_peer']:.2f}x on the 7x7 stem" in figures
    assert f"eagerly against torch {span([row['eager_vs_torch'] for row in rows])}" in figures


def test_the_host_cost_figures_are_the_studys():
    rows = rows_of("host-cost.json", "calls")
    copy = {row["key"]: row["us"] for row in rows if row["group"] == "copy"}
    new_shape = {row["key"]: row["us"] for row in rows if row["group"] == "new_shape"}
    figures = (ROOT / "benchmarks" / "README.md").read_text()
    assert (
        f"{copy['tmakit_copy_call_us']:.2f} us against torch's {copy['torch_copy_call_us']:.2f}; "
        f"a new shape {new_shape['new_shape_call_us']:.1f} us; the op {copy['tmakit_copy_op_call_us']:.2f} us"
    ) in figures


# -- every figure of benchmarks/README.md's table, against the files its row links ----------------
# A measured figure: a number with a unit, or any decimal (the unit written once for a list:
# "131.97 against 129.56 us"). Each is one of its files' values, rounded as written, in its unit
# or one the file keeps (us as seconds, TB/s as GB/s, % as a fraction); the few that are ratios
# of two values are computed in DERIVED, by name.
FIGURE = re.compile(r"(?<![\w.^])(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?\s?(x|us|ms|GB/s|TB/s|%)?(?![\w^])")
SCALES = {"us": (1, 1e6), "ms": (1, 1e3), "GB/s": (1, 1e-9), "TB/s": (1e-3, 1e-12), "%": (1, 100), "x": (1,)}
# A share of the L2 a rule reads (`plan.route.TORCH_FASTER_BEYOND_L2`), not a measured figure.
L2_SHARE = re.compile(r"\b(?:\d+%|half) of the L2\b|\bhalf the L2\b")
# Single samples and their spread: a figure is a median or a summary, never one of these.
SAMPLES = {"samples_us", "us_min_max", "min_us", "max_us", "kernel_us", "samples"}


def numbers(value: object):
    """Every number in a results file but single samples: numbers, and texts that are one ("34,304")."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, str):
        try:
            yield float(value.replace(",", ""))
        except ValueError:
            return
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in SAMPLES:
                yield from numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from numbers(item)


def rows_of(name: str, part: str | None = None) -> list[dict]:
    """A results file's rows, or those of one of its parts (a study measured from several angles)."""
    document = json.loads((RESULTS / name).read_text())
    return (document["parts"][part] if part else document)["rows"]


def _rowsum_ratio() -> float:
    us = {row["kernel"]: row["median_us"] for row in rows_of("rowsum.json") if row["shape"] == [32768, 16384]}
    return us["torch row-sum fp32"] / us["tmakit load+rowsum 4st x8w"]


def _generic_instructions() -> float:
    at_1_mib = [row for row in rows_of("ncu.json", "copy-generic") if row["mib"] == 1]

    def count(kind: str) -> float:
        values = [
            float(r["smsp__inst_executed.sum"].replace(",", ""))
            for r in at_1_mib
            if r["compiled_for"] == kind
        ]
        return sum(values) / len(values)

    return count("shape-generic") / count("shape-specialised")


def _copy_gap_below_streams() -> float:
    """'every copy at least 5% below them': the fastest copy's gap to the fastest one-way stream."""
    rate = {row["case"]: row["gb_per_s"] for row in rows_of("dram-ceiling.json")}
    copies = max(value for case, value in rate.items() if case.startswith("copy-"))
    streams = max(value for case, value in rate.items() if case.startswith(("read-", "write-")))
    return 100 * (1 - copies / streams)


DERIVED = {
    ("rowsum.json", "1.25x"): lambda: f"{_rowsum_ratio():.2f}x",
    ("ncu.json", "1.6x"): lambda: f"{_generic_instructions():.1f}x",
    ("dram-ceiling.json", "5%"): lambda: "5%" if _copy_gap_below_streams() >= 5 else "not 5%",
}


def _found(text: str, unit: str | None, values: list[float]) -> bool:
    digits = len(text.partition(".")[2])
    target, tolerance = float(text), 0.5 * 10**-digits * (1 + 1e-9)
    return any(abs(value * scale - target) <= tolerance for scale in SCALES[unit] for value in values)


def unmatched_figures(figure: str, files: list[str]) -> tuple[list[str], int]:
    """The figures of the text `figure` that none of `files` holds, and how many were checked."""
    values = [v for name in files for v in numbers(json.loads((RESULTS / name).read_text()))]
    figure = L2_SHARE.sub("a share of the L2", figure)  # a rule's, checked on its own below
    matches = [m.groups() for m in FIGURE.finditer(figure) if m.group(3) or "." in m.group(1)]
    unmatched, checked = [], 0
    for index, (number, upper, unit) in enumerate(matches):
        # a decimal without a unit has the next one's in its text ("131.97 against 129.56 us"),
        # else the last one before it
        written = unit or ""
        if unit is None:
            after = [u for _, _, u in matches[index + 1 :] if u]
            before = [u for _, _, u in matches[:index] if u]
            unit = (after or before[-1:] or ["x"])[0]
        for text in (number, upper) if upper else (number,):
            checked += 1
            shown = f"{text}{written}"
            derived = next(
                (f() for (name, fig), f in DERIVED.items() if name in files and fig == shown), None
            )
            if derived is not None:
                if derived != shown:
                    unmatched.append(f"{files}: {shown} is {derived} in the file")
            elif not _found(text, unit, values):
                unmatched.append(f"{files}: {shown} (read as {unit}; {figure.strip()[:70]})")
    return unmatched, checked


def test_every_figure_of_the_benchmarks_table_is_in_the_files_its_row_links():
    """A figure that drifts from its file fails here, unless the file happens to hold the new
    value too (a coincidence the specific checks above do not allow)."""
    lines = (ROOT / "benchmarks" / "README.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and "](results/" in line]
    assert len(rows) > 20  # the table was found
    unmatched, checked = [], 0
    for row in rows:
        found, count = unmatched_figures(row.split("|")[1], re.findall(r"\]\(results/([\w.-]+\.json)\)", row))
        unmatched += found
        checked += count
    assert checked > 60 and unmatched == [], "\n".join(unmatched)


def test_every_figure_of_the_readme_is_in_the_files_its_paragraph_links():
    """A README paragraph with a measured figure links the results file it comes from."""
    unmatched, checked = [], 0
    for paragraph in (ROOT / "README.md").read_text().split("\n\n"):
        if paragraph.lstrip().startswith(("```", "    ")):
            continue  # code: sizes and shapes, not measurements
        files = re.findall(r"\]\(benchmarks/results/([\w.-]+\.json)\)", paragraph)
        if not files:
            assert not [
                m for m in FIGURE.finditer(paragraph) if m.group(3) in ("us", "ms", "GB/s", "TB/s")
            ], paragraph
            continue
        found, count = unmatched_figures(" ".join(paragraph.split()), files)
        unmatched += found
        checked += count
    assert checked > 10 and unmatched == [], "\n".join(unmatched)


def test_the_many_tensors_figures_are_the_studys():
    rows = {row["case"]: row for row in rows_of("many.json", "lists")}
    reduce_rows = rows_of("rows.json", "index-reduce")
    figures = " ".join((ROOT / "benchmarks" / "README.md").read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split())

    def x(case: str, key: str = "device_vs_torch") -> str:
        return f"{rows[case][key]:.2f}x"

    one, many = "1000 random", "10000 x 4 KiB"
    assert (
        f"one launch {x('copy_many_ ' + one)} `_foreach_copy_` on 1,000 random tensors and "
        f"{x('copy_many_ ' + many)} on 10,000 of 4 KiB, `pack` {x('pack ' + one)} and "
        f"{x('pack ' + many)} `cat`"
    ) in figures
    unchecked = (
        f"{x('copy_many_ ' + one, 'unchecked_eager_vs_torch')} and "
        f"{x('copy_many_ ' + many, 'unchecked_eager_vs_torch')} `_foreach_copy_`"
    )
    assert unchecked in figures and unchecked in readme
    wide = [row["device_vs_torch"] for row in reduce_rows if row["row_bytes"] >= 256]
    assert f"from 256 bytes {span(wide)} torch's" in figures


def test_every_share_of_the_l2_written_is_the_rules():
    """A plain `add_` whose three streams pass a share of the L2 is torch's; that share is one
    value, `TORCH_FASTER_BEYOND_L2["add"]` (data/tuning.json). Every share of the L2 the README,
    the docs, the changelog and the docstrings write is it; where they say a strict call runs the
    ring "there", the ring's rule (`RING_BEYOND_L2`) starts at the same share."""
    from tmakit.plan.route import TORCH_FASTER_BEYOND_L2
    from tmakit.plan.tuning import TUNING

    share = TORCH_FASTER_BEYOND_L2["add"].share_of_l2
    assert TUNING["RING_BEYOND_L2"].value["add"].share_of_l2 == share
    rule = f"{share:.0%} of the L2"
    texts = [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")]
    texts += [*(ROOT / "benchmarks").glob("*.md"), *(ROOT / "src" / "tmakit").rglob("*.py")]
    written = {
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in texts
        for match in L2_SHARE.finditer(" ".join(path.read_text().split()))
    }
    assert any(line.startswith("README.md") for line in written)  # the README states it
    assert [line for line in written if not line.endswith(rule)] == []


def test_the_api_pages_host_cost_figures_are_the_studys():
    """docs/api.md's host costs: a new shape against a repeated call, a fresh process's first copy,
    and the op's dispatcher path against the direct call and a no-op op, all of one run."""
    us = {(row["group"], row["key"]): row["us"] for row in rows_of("host-cost.json", "calls")}
    api = " ".join((ROOT / "docs" / "api.md").read_text().split())
    new, repeated = us["new_shape", "new_shape_call_us"], us["new_shape", "repeated_call_us"]
    assert (
        f"A new shape of a compiled class costs {new / repeated:.1f}x a repeated call's host time "
        f"({new:.1f} against {repeated:.1f} us on the H200's host); a fresh process's first copy "
        f"of a class kept on disk, {us['first_call', 'warm_disk_cache_first_copy_s'] * 1e3:.1f} ms"
    ) in api
    op, direct = us["copy", "tmakit_copy_op_call_us"], us["copy", "tmakit_copy_call_us"]
    assert (
        f"({op:.2f} us of host time on the H200's host against {direct:.2f} us for `tmakit.copy_` in "
        f"the same run, {op / direct:.2f}x; an op of the same schema whose kernel does nothing costs "
        f"{us['copy', 'tmakit_copy_noop_op_call_us']:.2f} us"
    ) in api
    assert json.loads((RESULTS / "host-cost.json").read_text())["parts"]["calls"]["context"]["device"] == (
        "NVIDIA H200"
    )


# -- docs/results.md: which card each figure was measured on ------------------------------------
CARD = re.compile(r"\b(H100|H200|CPU)\b")
RESULTS_LINK = re.compile(
    r"\]\(\.\./benchmarks/results/([\w.-]+\.json)\)"
    r"(?:,? (?:part `([\w-]+)`|(`context\.parts`)(?: \"([\w-]+)\")?))?"
)


def card_of(device: object) -> str | None:
    """ "NVIDIA H100 80GB HBM3" -> "H100"; None for text that names no card."""
    found = CARD.search(device) if isinstance(device, str) else None
    return found.group(1) if found else None


def cards_in(node: object) -> set[str]:
    """Every card a results file's node names in a `device` (a run's context, or a part's own)."""
    if isinstance(node, list):
        return {card for item in node for card in cards_in(item)}
    if not isinstance(node, dict):
        return set()
    cards = {card_of(node.get("device"))} - {None}
    return cards.union(*(cards_in(value) for key, value in node.items() if key != "rows"))


def measured_on(name: str, part: str, in_context: str, context_part: str) -> set[str]:
    """The cards a results file (`part` of its `parts`, its `context.parts` or one of them, or
    the file as a whole; "" where the link names none) was measured on; a context whose device
    is null ran on the CPU."""
    document = json.loads((RESULTS / name).read_text())
    if part:
        node = document["parts"][part]
        return cards_in(node) or {card_of(node.get("what"))} - {None}
    if in_context:
        parts = document["context"]["parts"]
        return cards_in(parts[context_part] if context_part else parts)
    if "context" in document:
        return {card_of(document["context"]["device"]) or "CPU"}
    return cards_in(document["parts"])


def results_units(text: str):
    """docs/results.md as (heading, unit) pairs: each table row, bullet and paragraph; code and
    tables' header rows left out."""
    heading, unit, in_code = "", [], False
    lines = [*text.splitlines(), ""]
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if line.startswith("```"):
            in_code = not in_code
            continue
        starts = line.startswith(("## ", "| ", "- ")) or not line.strip()
        if unit and (starts or in_code):
            yield heading, " ".join(" ".join(unit).split())
            unit = []
        if in_code or not line.strip() or line.startswith("|---") or following.startswith("|---"):
            continue
        if line.startswith("## "):
            heading = line
        else:
            unit.append(line)


def test_every_results_figure_names_the_card_it_was_measured_on():
    """docs/results.md's rule: each heading names the cards its section's files were measured on;
    under one that names both, a row, bullet or paragraph measured on the H100 says so (one that
    names no card is the H200's). A table row that links no file is its previous unit's ("same")."""
    sections: dict[str, set[str]] = {}
    wrong, linked = [], None
    for heading, unit in results_units((ROOT / "docs" / "results.md").read_text()):
        if heading not in sections:
            sections[heading], linked = set(), None
        links = RESULTS_LINK.findall(unit)
        if links:
            linked = set().union(
                *(measured_on(file, part, context, name) for file, part, context, name in links)
            )
        elif not unit.startswith("| ") or linked is None:
            continue
        sections[heading] |= linked
        named = set(CARD.findall(unit))
        heading_cards = set(CARD.findall(heading))
        allowed = named or (heading_cards if len(heading_cards) == 1 else {"H200"})
        if not linked <= allowed:
            wrong.append(f"{sorted(linked)} measured, {sorted(allowed)} read: {unit[:90]}")
    headings = {heading: set(CARD.findall(heading)) for heading in sections}
    assert {h: cards for h, cards in headings.items() if cards != sections[h]} == {}, sections
    assert wrong == [], "\n".join(wrong)


def test_the_results_page_names_the_runs_software_and_stays_short():
    """The cards paragraph names the driver, CUDA, torch and DSL every GPU run's context holds, and
    the page stays a summary (200 lines; earlier runs are git history)."""
    contexts = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            if card_of(node.get("device")) and "driver" in node:
                contexts.append(node)
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    for path in RESULTS.glob("*.json"):
        collect(json.loads(path.read_text()))
    text = (ROOT / "docs" / "results.md").read_text()
    cards = " ".join(text[text.index("The cards:") :].split("\n\n")[0].split())
    for context in contexts:
        torch = ".".join(context["torch"].split("+")[0].split(".")[:2])
        software = (context["driver"], f"CUDA {context['cuda_runtime']}", f"torch {torch}")
        assert all(item in cards for item in software), (context, cards)
        assert f"nvidia-cutlass-dsl {context['nvidia_cutlass_dsl']}" in cards
    assert len(contexts) > 20 and len(text.splitlines()) <= 200


def test_every_link_to_a_section_finds_its_heading():
    """A link to `page.md#section` (or `#section`) names a heading of that page, as GitHub makes
    its anchor: lower case, punctuation but hyphens dropped, spaces as hyphens."""

    def anchors(page: Path) -> set[str]:
        headings = [
            line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")
        ]
        return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}

    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "README.md"]
    pages += sorted((ROOT / "docs").glob("*.md"))
    broken, checked = [], 0
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([\w-]+)\)", page.read_text()):
            checked += 1
            linked = (page.parent / target).resolve() if target else page
            if anchor not in anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert checked > 5 and broken == []
