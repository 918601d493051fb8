"""The screen written out: Markdown for people, JSON for tools. Pure."""

from __future__ import annotations

from typing import Any

from reflexguard.core.screen import Row, Screen


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _row_json(row: Row) -> dict[str, Any]:
    return {"key": row.key, "decisions": row.decisions, "measured": row.measured,
            "thin": row.thin, "thin_share": row.thin_share,
            "reference_errors": row.reference_errors,
            "predicted_error_rate": row.predicted_error_rate,
            "predicted_flip_rate": row.predicted_flip_rate,
            "candidate_decisions": row.candidate_decisions,
            "candidate_errors": row.candidate_errors,
            "candidate_rate": row.candidate_error_rate}


def screen_json(result: Screen, sources: dict[str, Any]) -> dict[str, Any]:
    calibration = result.calibration
    return {
        "schema": "reflexguard.screen/1",
        "simulated_calibration": calibration.simulated,
        "threshold": result.threshold,
        "calibration": {"model": calibration.model, "reference": calibration.reference,
                        "candidate": calibration.candidate, "source": calibration.source,
                        "error_definition": calibration.error_definition,
                        "simulated": calibration.simulated,
                        "bins": [{"lo": b.lo if b.lo != float("-inf") else None,
                                  "hi": b.hi if b.hi != float("inf") else None,
                                  "n": b.n, "flip_rate": b.flip_rate,
                                  "error_rate": b.error_rate} for b in calibration.bins]},
        "sources": sources,
        "overall": _row_json(result.overall),
        "by_tool": [_row_json(r) for r in result.by_tool],
        "by_channel": [_row_json(r) for r in result.by_channel],
    }


def _table(rows: tuple[Row, ...], first: str, candidate: bool, candidate_column: str) -> list[str]:
    head = (f"| {first} | decisions | margin known | thin share | predicted error rate | "
            "predicted flip rate |")
    rule = "|---|---:|---:|---:|---:|---:|"
    if candidate:
        head += f" candidate calls | {candidate_column} |"
        rule += "---:|---:|"
    lines = [head, rule]
    for row in rows:
        line = (f"| `{row.key}` | {row.decisions} | {row.measured} | {_pct(row.thin_share)} | "
                f"{_pct(row.predicted_error_rate)} | {_pct(row.predicted_flip_rate)} |")
        if candidate:
            line += f" {row.candidate_decisions or 0} | {_pct(row.candidate_error_rate)} |"
        lines.append(line)
    return lines


def screen_markdown(result: Screen, sources: dict[str, Any]) -> str:
    calibration = result.calibration
    overall = result.overall
    label = " (SIMULATED calibration)" if calibration.simulated else ""
    lines = [
        f"# Margin risk screen: {calibration.reference} → {calibration.candidate}{label}", "",
        f"- reference events: {sources.get('reference')} ({overall.decisions} decisions, "
        f"{overall.measured} with a known name margin; "
        f"{sources.get('skipped_lines', 0)} unreadable lines skipped)",
        f"- calibration: {sources.get('calibration')} — {calibration.source}; model "
        f"{calibration.model}; {sum(b.n for b in calibration.bins)} calibration decisions; "
        f"error = {calibration.error_definition}",
        f"- thin margin: name margin below {result.threshold:g} nats",
    ]
    if calibration.simulated:
        lines.append("- **The calibration is simulated (a test fixture or a model of one): "
                     "the predictions below are not measurements.**")
    lines += [
        "", "## Overall", "",
        f"- thin: {_pct(overall.thin_share)} of decisions with a known margin",
        f"- invalid at the reference: {_pct(overall.reference_errors / overall.decisions)}"
        if overall.decisions else "- invalid at the reference: –",
        f"- predicted error rate at {calibration.candidate}: "
        f"{_pct(overall.predicted_error_rate)}; predicted name flips: "
        f"{_pct(overall.predicted_flip_rate)}",
    ]
    if result.has_candidate:
        lines.append(f"- observed at the candidate ({sources.get('candidate')}): "
                     f"{_pct(overall.candidate_error_rate)} of "
                     f"{overall.candidate_decisions} calls invalid (any channel; the "
                     "events cannot tell a valid but wrong call, which the calibration's "
                     "error rate may count)")
    lines += ["", "## Per tool", "",
              *_table(result.by_tool, "tool", result.has_candidate, "candidate invalid"),
              "", "## Per channel (at the reference)", "",
              *_table(result.by_channel, "channel", result.has_candidate,
                      "candidate share in channel"),
              "", "Predicted rates are the calibration bin's rate at each decision's "
              "reference name margin, averaged over the decisions whose margin is known.", ""]
    return "\n".join(lines)
