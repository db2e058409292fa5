"""A forecast for people: the terminal table, markdown, and a PNG (goodput against the save interval; badput
as bars). ``--json`` is Forecast.to_json. matplotlib is imported only when a picture is drawn."""

from __future__ import annotations

from pathlib import Path

from chaos.forecast.forecast import Forecast


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if abs(x) >= 0.01 else f"{100 * x:.2f}%"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.1f} s"


def markdown(f: Forecast) -> str:
    """The report as markdown tables (the terminal shows the same text)."""
    j = f.job
    span = f"{j.days:g} days" if j.days is not None else f"{j.work_steps} steps"
    band = f.outcome.band()
    lines = [
        f"## Forecast: {j.gpus} GPUs ({j.nodes} nodes), {span}, {f.failures}",
        "",
        f"{j.replicas} replicas, seed {j.seed}; {f.outcome.failures.mean():.1f} failures per job on average.",
        "",
        "| goodput | mean | p10 | p90 |",
        "|---|---|---|---|",
        f"| useful step time / wall | {_pct(band['mean'])} | {_pct(band['p10'])} | {_pct(band['p90'])} |",
        "",
        "| badput (ml-goodput-measurement's terms) | share of wall time |",
        "|---|---|",
        *(f"| {k} | {_pct(v)} |" for k, v in f.outcome.badput_share().items()),
        "",
        f"Save interval: {f.interval} steps ({_duration(f.interval * f.period_s)}); best simulated: {f.best_interval} steps "
        f"({_duration(f.best_interval * f.period_s)}); Young/Daly sqrt(2 MTBF C): {f.young_daly_steps:.0f} steps "
        f"({_duration(f.young_daly_steps * f.period_s)}).",
        "",
        "| save interval (steps) | interval | mean goodput |",
        "|---|---|---|",
        *(f"| {k}{' (best)' if k == f.best_interval else ''} | {_duration(k * f.period_s)} | {_pct(g)} |" for k, g in f.curve),
        "",
        "| what if | setting | mean | p10 | p90 |",
        "|---|---|---|---|---|",
        *(f"| {r.name} | {r.description} | {_pct(r.band['mean'])} | {_pct(r.band['p10'])} | {_pct(r.band['p90'])} |"
          for r in f.what_if),
    ]
    return "\n".join(lines) + "\n"


def plot(f: Forecast, path: str | Path) -> Path:
    """Goodput against the save interval (Young/Daly's value marked), and the badput categories as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    ks = [k * f.period_s for k, _ in f.curve]
    left.plot(ks, [100 * g for _, g in f.curve], marker="o")
    left.axvline(f.young_daly_steps * f.period_s, linestyle="--", color="grey", label="Young/Daly")
    left.set_xscale("log")
    left.set_xlabel("save interval (s)")
    left.set_ylabel("mean goodput (%)")
    left.legend()
    shares = f.outcome.badput_share()
    right.barh(list(shares), [100 * v for v in shares.values()])
    right.set_xlabel("share of wall time (%)")
    right.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"{f.job.gpus} GPUs, {f.failures}: goodput {100 * f.outcome.band()['mean']:.1f}%")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
