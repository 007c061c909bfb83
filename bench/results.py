"""What a run collects, rendered as one markdown table (plus notes) and a PNG chart."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Results:
    machine: dict[str, str] = field(default_factory=dict)
    server: str = ""
    # (scenario, metric, value, goal/comment)
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # lateness samples (ms) per side, for the chart
    series: dict[str, list[float]] = field(default_factory=dict)
    # capacity sweep: side -> [(objects, p99_ms, runs_per_s)]
    sweep: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)

    def row(self, scenario: str, metric: str, value: str, comment: str = "") -> None:
        self.rows.append((scenario, metric, value, comment))
        print(f"  [{scenario}] {metric}: {value} {comment}", flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    def markdown(self, title: str) -> str:
        lines = [f"# {title}", ""]
        lines.append(
            "Machine: "
            + ", ".join(f"{k} {v}" for k, v in self.machine.items())
            + f". Dev server: {self.server}."
        )
        lines.append("")
        lines.append("| scenario | metric | value | goal / comment |")
        lines.append("| --- | --- | --- | --- |")
        for scenario, metric, value, comment in self.rows:
            cells = [c.replace("|", "\\|") for c in (scenario, metric, value, comment)]
            lines.append("| " + " | ".join(cells) + " |")
        if self.notes:
            lines.append("")
            lines.append("Notes:")
            lines.append("")
            lines.extend(f"- {n}" for n in self.notes)
        return "\n".join(lines) + "\n"

    def chart(self, path: Path, title: str) -> bool:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.note("matplotlib not installed (pip install -e '.[bench]'): no chart written")
            return False
        panels = 2 if self.sweep else 1
        fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 5), squeeze=False)
        ax = axes[0][0]
        for name, values in self.series.items():
            if not values:
                continue
            ordered = sorted(max(v, 0.5) for v in values)
            n = len(ordered)
            ax.plot(
                ordered,
                [(i + 1) / n for i in range(n)],
                label=f"{name} (n={n})",
                color=_color(name),
            )
        ax.set_xscale("log")
        ax.set_xlabel("lateness, ms (log)")
        ax.set_ylabel("fraction of samples <= x")
        ax.set_title("Lateness CDF (first 3 s dropped)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        if self.sweep:
            ax2 = axes[0][1]
            for side, points in self.sweep.items():
                xs = [p[0] for p in points]
                ax2.plot(
                    xs,
                    [max(p[1], 1) for p in points],
                    marker="o",
                    label=side,
                    color=_color(side),
                )
            ax2.axhline(1000, color="red", linestyle="--", linewidth=1, label="p99 = 1 s")
            ax2.set_yscale("log")
            ax2.set_xlabel("objects at 1 run/s each")
            ax2.set_ylabel("run-start lateness p99, ms (log)")
            ax2.set_title("Capacity sweep")
            ax2.grid(True, which="both", alpha=0.3)
            ax2.legend(fontsize=8)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return True


def _color(name: str) -> str:
    """One color per side across both panels."""
    for key, color in (
        ("timer", "tab:gray"),
        ("chain", "tab:orange"),
        ("durability", "tab:blue"),
        ("native", "tab:red"),
    ):
        if key in name:
            return color
    return "tab:green"
