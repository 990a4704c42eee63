#!/usr/bin/python3
"""Draw the layout of sluice's Grafana dashboard as a PNG.

A LAYOUT RENDER, NOT A GRAFANA SCREENSHOT: no Grafana server (and no
browser for its image renderer) is available where this project is built,
so this draws what sluice-dashboard.json declares — each panel's place on
Grafana's 24-column grid, its title, kind, unit, series (legend formats),
thresholds and value mappings — without data.

    /usr/bin/python3 deploy/grafana/render_layout.py   # Debian's python3-matplotlib

reads deploy/grafana/sluice-dashboard.json and writes
docs/dashboard-layout.png (run from the repository's root).
"""

import json
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

SRC = "deploy/grafana/sluice-dashboard.json"
OUT = "docs/dashboard-layout.png"

# Grafana's unit ids, as the panel's axis or value shows them.
UNITS = {
    "binBps": "bytes/s (KiB/s, MiB/s)",
    "Bps": "bytes/s (kB/s, MB/s)",
    "pps": "packets/s",
    "reqps": "requests/s",
    "recps": "records/s",
    "epm": "events/min",
    "s": "seconds (ms, µs)",
    "percentunit": "percent",
    "bytes": "bytes (KiB, MiB)",
    "short": "count",
    "none": "plain number (flags, states)",
}
KIND = {"timeseries": "time series", "stat": "stat", "table": "table", "state-timeline": "state timeline"}
COLOURS = {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c"}


def unit_name(u):
    return UNITS.get(u, u or "(no unit)")


def thresholds(fc):
    steps = (fc.get("defaults", {}).get("thresholds") or {}).get("steps") or []
    return [(s.get("value"), s.get("color")) for s in steps]


def mappings(fc):
    out = []
    for m in fc.get("defaults", {}).get("mappings") or []:
        for v, r in sorted((m.get("options") or {}).items()):
            out.append((v, r.get("text"), r.get("color")))
    return out


def columns(p):
    """A table's value columns: name and unit, from its overrides."""
    out = []
    for o in p.get("fieldConfig", {}).get("overrides") or []:
        props = {q["id"]: q.get("value") for q in o.get("properties", [])}
        if "unit" in props:
            out.append("%s: %s" % (props.get("displayName", o["matcher"].get("options")), unit_name(props["unit"])))
    return out


def main():
    d = json.load(open(SRC))
    panels = d["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    px_col, px_row = 68, 30  # Grafana: 24 columns, 30 px a grid row
    width, height = 24 * px_col, (rows + 3) * px_row
    dpi = 100
    fig = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    top = 3 * px_row
    ax.text(10, 22, "%s — LAYOUT RENDER, not a Grafana screenshot (no data): %s" % (d["title"], OUT),
            fontsize=13, weight="bold", va="top")
    ax.text(10, 52, "Drawn by deploy/grafana/render_layout.py from %s: each panel's place on the 24-column grid, "
            "its title, kind, unit, series and thresholds." % SRC, fontsize=9, va="top", color="#444")

    for p in panels:
        g = p["gridPos"]
        x, y = g["x"] * px_col + 4, top + g["y"] * px_row + 3
        w, h = g["w"] * px_col - 8, g["h"] * px_row - 6
        if p["type"] == "row":
            ax.add_patch(Rectangle((x, y), w, h, facecolor="#e8eaf0", edgecolor="none"))
            ax.text(x + 6, y + h / 2, "▾ " + p["title"], fontsize=11, weight="bold", va="center")
            continue
        fc = p.get("fieldConfig", {})
        ax.add_patch(Rectangle((x, y), w, h, facecolor="#f7f8fa", edgecolor="#b8bcc6", linewidth=1))
        ax.text(x + 6, y + 5, p["title"], fontsize=9.5, weight="bold", va="top")
        unit = fc.get("defaults", {}).get("unit")
        line = KIND.get(p["type"], p["type"])
        if p["type"] != "table":
            line += " · unit: " + unit_name(unit)
        ax.text(x + 6, y + 22, line, fontsize=8, va="top", color="#1f60c4")
        ty = y + 38
        wrap = max(20, int(w / 5.6))
        lines = []
        if p["type"] == "table":
            lines += ["columns: host, direction, type, entity, " + ", ".join(columns(p))]
        for t in p.get("targets", []):
            lf = t.get("legendFormat")
            if lf:
                lines.append("• " + lf)
        for v, text, col in mappings(fc):
            lines.append("%s → %s (%s)" % (v, text, col))
        for s in textwrap.wrap(" ".join(lines), wrap) if p["type"] == "table" else lines:
            if ty > y + h - 26:
                ax.text(x + 6, ty, "…", fontsize=7.5, va="top")
                break
            ax.text(x + 6, ty, textwrap.shorten(s, wrap), fontsize=7.5, va="top", color="#333")
            ty += 12
        steps = thresholds(fc)
        if steps and p["type"] in ("stat", "state-timeline"):
            sw = (w - 12) / len(steps)
            for i, (v, col) in enumerate(steps):
                sx = x + 6 + i * sw
                ax.add_patch(Rectangle((sx, y + h - 20), sw - 2, 14, facecolor=COLOURS.get(col, col), edgecolor="none"))
                label = "base" if v is None else ("from %g" % v if unit != "percentunit" else "from %g %%" % (v * 100))
                ax.text(sx + 4, y + h - 13, label, fontsize=7, va="center", color="white", weight="bold")
    fig.savefig(OUT, dpi=dpi, metadata={"Software": None})
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
