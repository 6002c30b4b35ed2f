"""Timeline pictures of real-clock trials (needs the optional ``plots`` extra).

One panel per variant, one trial each: a lane per worker attempt, one for the
janitor and one for the destination, on the trial's monotonic time axis, with
the lease expiry, the effects, the release and the retry marked. The text
evidence never depends on this module; ``available()`` says whether it can run.
"""

from __future__ import annotations

from pathlib import Path

from fence.base import evidence
from fence.live.results import Event, VariantResult


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _lanes(events: list[Event]) -> list[str]:
    workers = list(dict.fromkeys(e.lane for e in events if e.lane.startswith("worker")))
    return workers + ["janitor", "destination"]


def _panel(ax, title: str, events: list[Event]) -> None:
    lanes = _lanes(events)
    y = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    end = max(e.t for e in events) if events else 1.0
    for lane in lanes:
        if not lane.startswith("worker"):
            continue
        attempt = lane.split(" ", 1)[1]
        mine = [e for e in events if e.lane == lane]
        asked = next((e.t for e in mine if e.kind == "ask"), None)
        reserved = next((e.t for e in mine if e.kind == "reserve"), None)
        started = next((e.t for e in mine if e.kind == "work"), None)
        finish = [e.t for e in mine if e.kind == "crash"] + [
            e.t for e in events if e.lane == "destination" and e.kind in ("effect", "refused") and e.label.split()[0] == attempt
        ]
        if asked is not None and reserved is not None and reserved - asked > 1e-3:
            ax.plot([asked, reserved], [y[lane]] * 2, color="0.75", lw=2, solid_capstyle="butt")
        if started is not None:
            stop = min(finish) if finish else end
            ax.plot([started, stop], [y[lane]] * 2, color="tab:blue", lw=6, alpha=0.6, solid_capstyle="butt")
        if reserved is not None:
            retry = not attempt.endswith("#1")
            ax.plot(reserved, y[lane], marker=">", color="tab:purple" if retry else "0.3", ms=7)
            label = next(e.label for e in mine if e.kind == "reserve")
            # One label per reservation: two stacked at one point overprint each other.
            # The unit an heir gets was released by the janitor; its owner may have
            # crashed (crash boundary, contention) or may still be working (delayed commit).
            inherits = "inheriting" in label
            text = ("retry, on the released unit" if retry else "inherits the released unit") if inherits else (
                "retry" if retry else None
            )
            if text:
                ax.annotate(text, (reserved, y[lane]), xytext=(0, 7), textcoords="offset points", fontsize=7,
                            color="tab:red" if inherits else "tab:purple")
        for e in mine:
            if e.kind == "crash":
                ax.plot(e.t, y[lane], marker="X", color="black", ms=9)
                ax.annotate(f"crash {e.label.split(' ', 1)[1].replace('crashes ', '')}", (e.t, y[lane]),
                            xytext=(0, -12), textcoords="offset points", fontsize=7)
            elif e.kind == "stale":
                ax.plot(e.t, y[lane], marker="s", color="tab:gray", ms=5)
    keys_written: set[str] = set()
    few = sum(1 for e in events if e.kind == "effect") <= 4
    for e in events:
        if e.lane == "destination" and e.kind == "effect":
            attempt = e.label.split()[0]
            key = attempt.split("#")[0]
            duplicate = key in keys_written
            keys_written.add(key)
            color = "tab:red" if duplicate else "tab:green"
            ax.plot(e.t, y["destination"], marker="*", color=color, ms=13 if few else 9)
            if few or duplicate:
                ax.annotate(f"effect {attempt}" + (" (duplicate)" if duplicate else ""),
                            (e.t, y["destination"]), xytext=(0, 8), textcoords="offset points", fontsize=7, color=color)
        elif e.lane == "destination" and e.kind == "refused":
            ax.plot(e.t, y["destination"], marker="x", color="tab:red", ms=9, mew=2)
            ax.annotate(f"refused {e.label.split()[0]}", (e.t, y["destination"]), xytext=(0, -12),
                        textcoords="offset points", fontsize=7, color="tab:red")
        elif e.lane == "destination" and e.kind == "abandon":
            ax.plot(e.t, y["destination"], marker="D", color="tab:purple", ms=6)
            ax.annotate(f"abandon {e.label}", (e.t, y["destination"]), xytext=(3, -12),
                        textcoords="offset points", fontsize=7, color="tab:purple")
        elif e.lane == "janitor" and e.kind == "expiry" and "unused" in e.label:
            ax.plot(e.t, y["janitor"], marker="o", color="tab:red", ms=6)
            ax.annotate("expired: frees the unit", (e.t, y["janitor"]), xytext=(3, -12), textcoords="offset points", fontsize=7)
        elif e.lane == "janitor" and e.kind in ("hold", "settle"):
            ax.plot(e.t, y["janitor"], marker="o", color="tab:orange", ms=6)
            ax.annotate(e.label.split(" (")[0], (e.t, y["janitor"]), xytext=(3, -12), textcoords="offset points", fontsize=7)
    expiries = [e.t for e in events if e.kind == "expiry"]
    releases = [e.t for e in events if e.kind == "release"]
    for t in expiries[:1]:
        ax.axvline(t, color="tab:orange", ls="--", lw=1)
        ax.annotate("lease expiry", (t, len(lanes) - 0.5), xytext=(3, 0), textcoords="offset points", fontsize=7, color="tab:orange")
    for t in releases[:1]:
        ax.axvline(t, color="tab:red", ls=":", lw=1.5)
        ax.annotate("release", (t, len(lanes) - 0.85), xytext=(3, 0), textcoords="offset points", fontsize=7, color="tab:red")
    ax.set_yticks(list(y.values()), labels=list(y.keys()), fontsize=7)
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.set_xlim(0, end * 1.08 + 0.01)
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)


def draw(name: str, variants: list[VariantResult], path: Path, command: str) -> Path:
    """One PNG for one experiment, written atomically; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [v for v in variants if v.trials and v.trials[0].events]
    if name == "contention":  # the base-lease row only: twelve lanes are enough
        base = [v for v in shown if abs(v.lease - variants[-1].lease) < 1e-9] or shown[:1]
        shown = base
    heights = [0.35 * len(_lanes(v.trials[0].events)) + 0.8 for v in shown]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, variant in zip(axes[:, 0], shown):
        counts = variant.summary.split(" trials=")[1].split(" ")[1:3]
        _panel(ax, f"{variant.label}, trial 1 of {len(variant.trials)}   (all trials: {' '.join(counts)})", variant.trials[0].events)
    axes[-1, 0].set_xlabel("seconds since the trial started (monotonic clock)")
    fig.suptitle(f"fence experiments: {name}  ({command})", fontsize=9)
    fig.tight_layout()
    with evidence.atomic_target(path) as temporary:
        fig.savefig(temporary, format="png", dpi=110)
    plt.close(fig)
    return path
