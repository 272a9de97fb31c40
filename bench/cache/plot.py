#!/usr/bin/env python3
"""Plots a sens_cachebuf --json file (gnuplot): ns per line against the bytes of buffer heads
touched (N x touch), one line per layout, one panel per buffer size, with the L1 and L2
sizes marked.

    bench/cache/plot.py cachebuf.json docs/results/cachebuf.png
"""
import json
import math
import subprocess
import sys

LAYOUTS = ["aligned-4k", "aligned-huge", "tyche"]
COLORS = {"aligned-4k": "#7f8c8d", "aligned-huge": "#c0392b", "tyche": "#27ae60"}


def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 and b % (1 << 20) == 0 else f"{b >> 10} KiB"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        j = json.load(f)
    levels = {l["level"]: l["size_bytes"] for l in j["geometry"]["levels"]}
    sizes = [s["size"] for s in j["sizes"]]
    cols = 2 if len(sizes) > 1 else 1
    rows = (len(sizes) + cols - 1) // cols
    top = 2 ** math.ceil(math.log2(max([p["ns_per_line"] for p in j["points"]] + [2])))

    script = [f'set terminal pngcairo size {640 * cols},{420 * rows} font ",10"',
              f'set output "{sys.argv[2]}"',
              f'set multiplot layout {rows},{cols} title "sens_cachebuf: '
              f'{j["geometry"]["describe"]}" font ",11" noenhanced',
              "set logscale xy 2", "set grid", "set key bottom right",
              # One y range for all panels, so the sizes compare at a glance.
              f"set yrange [1:{top}]",
              'set xlabel "heads touched (N x touch), KiB"', 'set ylabel "ns per cache line"']
    for size in sizes:
        pts = [p for p in j["points"] if p["size"] == size]
        touch = pts[0]["touch"] if pts else 0
        script.append("unset arrow")
        for lvl in (1, 2):
            if lvl in levels:
                x = levels[lvl] / 1024
                script.append(f'set arrow from {x}, graph 0 to {x}, graph 1 nohead dt 2 lc "gray"')
                script.append(f'set label {lvl} "L{lvl}" at {x}, graph 0.95 offset 0.5,0')
        script.append(f'set title "{size_name(size)} buffers, first {size_name(touch)} touched"')
        plots = []
        for layout in LAYOUTS:
            plots.append(f'"-" using 1:2 with linespoints lw 2 pt 7 ps 0.6 '
                         f'lc rgb "{COLORS[layout]}" title "{layout}"')
        script.append("plot " + ", ".join(plots))
        for layout in LAYOUTS:
            for p in sorted((p for p in pts if p["layout"] == layout), key=lambda p: p["n"]):
                script.append(f'{p["touched_bytes"] / 1024} {p["ns_per_line"]}')
            script.append("e")
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)


if __name__ == "__main__":
    main()
