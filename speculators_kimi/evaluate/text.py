"""The text forms of ``evaluate``'s reports (``--json`` writes the dicts as is)."""

from __future__ import annotations

from typing import Any

__all__ = ["format_epoch_table", "format_report"]


def _rates(rates: list[float | None]) -> str:
    return ", ".join("-" if r is None else f"{r:.3f}" for r in rates)


def format_report(report: dict[str, Any]) -> str:
    lossless = report["lossless"]
    lines = [
        f"mean acceptance length  {report['mean_acceptance_length']:.3f} "
        f"(K={report['num_speculative_tokens']}, T={report['temperature']})",
        "acceptance per position "
        f"{_rates(report['acceptance_rate_per_position'])} (marginal: share of "
        "steps accepting at least k, as vLLM logs it)",
        "  conditional           "
        f"{_rates(report['conditional_acceptance_rate_per_position'])} (accepting "
        "k once k-1 were)",
        f"prompts                 {report['num_prompts']} "
        f"({report['num_generated_tokens']} tokens generated, "
        f"{report['verifier_forwards']} verifier forwards"
        + _rollbacks(report.get("rollback_forwards", 0))
        + ")",
        f"wall time               {report['wall_time_s']} s",
    ]
    if lossless is not None:
        mismatched = report["mismatched_prompts"]
        lines.append(
            "lossless                "
            + ("yes" if lossless else f"NO: {len(mismatched)} prompt(s) differ")
            + f" (greedy decoding {report['greedy_wall_time_s']} s)"
        )
    lines.append("by context length       tokens        steps  acceptance length")
    lines += [
        f"  {b['context_from']:>21}-{b['context_to']:<12} {b['num_drafts']:>6}  "
        f"{b['mean_acceptance_length']:.3f}"
        for b in report["acceptance_by_context"]
    ]
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    return "\n".join(lines)


def format_epoch_table(table: dict[str, Any]) -> str:
    lines = ["epoch  validation loss  acceptance length"]
    for row in table["epochs"]:
        loss = "-" if row["val_loss"] is None else f"{row['val_loss']:.4f}"
        mark = "  <- best" if row["epoch"] == table["best"]["epoch"] else ""
        lines.append(
            f"{row['epoch']:>5}  {loss:>15}  {row['mean_acceptance_length']:>17.3f}"
            + mark
        )
    best = table["best"]
    lines.append(
        f"best by acceptance length: epoch {best['epoch']} ({best['checkpoint']}); "
        f"lowest validation loss: epoch {table['lowest_val_loss_epoch']}"
    )
    return "\n".join(lines)


def _rollbacks(count: int) -> str:
    """The forwards a hybrid verifier's rollback added, where there were any."""
    if not count:
        return ""
    return f", {count} of them re-running accepted tokens after a rollback"
