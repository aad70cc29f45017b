#!/usr/bin/env bash
# Runs chosen benchmarks of two builds alternately and prints each figure of the second beside the first, with their
# ratio: a change to a hot path is compared on one machine, in one hour, before it lands.
#
#   scripts/compare-benchmarks.sh [--runs N] BASE NEW [-- BENCHMARK ARGUMENTS…]
#
# BASE and NEW are commits (anything `git rev-parse` takes), `.` for the work tree as it is, uncommitted changes
# included, or `bin:FOLDER` for release binaries built before (a folder holding CumulusBenchmarks and cumulus, such as
# a copy of .build-compare/worktree/build/release kept before a change). Each commit is checked out once into .build-compare/<commit>/ and built there in release mode
# (CumulusBenchmarks and cumulus, which `--only requests` drives); the work tree builds into .build-compare/worktree/.
# The runs alternate (BASE, NEW, BASE, NEW, …; default 3 each) so a machine that slows down or speeds up during the
# comparison weighs on both. Every run's output is kept in .build-compare/runs/.
#
# The comparison: every Markdown table row that both builds print (matched by its first cell, the benchmark's name)
# gives its numbers in order; for each, the median of BASE's runs, the median of NEW's, and NEW / BASE. A figure where
# more is better (records/s) and one where less is better (seconds, ms, MiB) read the other way round; the row's
# words say which.
#
# Example (the sync engine's first sync, the commit before the third wave against the work tree):
#   scripts/compare-benchmarks.sh --runs 2 12d5c70 . -- --only sync
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

runs=3
if [ "${1:-}" = "--runs" ]; then
    runs=$2
    shift 2
fi
if [ $# -lt 2 ]; then
    sed -n '4,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
base=$1
new=$2
shift 2
if [ "${1:-}" = "--" ]; then shift; fi
arguments=("$@")

out="$root/.build-compare"
mkdir -p "$out/runs"

# Builds one side and prints the folder of its release binaries.
build() {
    local ref=$1 source folder
    if [ "${ref#bin:}" != "$ref" ]; then
        echo "${ref#bin:}"
        return
    fi
    if [ "$ref" = "." ]; then
        source=$root
        folder=$out/worktree
    else
        local commit
        commit=$(git rev-parse --verify "$ref^{commit}")
        folder=$out/$commit
        source=$folder/source
        if [ ! -d "$source" ]; then
            mkdir -p "$folder"
            git worktree add --detach "$source" "$commit" >&2
        fi
    fi
    # Each side keeps its own build folder: rebuilding one never invalidates the other.
    (cd "$source" && swift build -c release --scratch-path "$folder/build" --product CumulusBenchmarks >&2 \
        && swift build -c release --scratch-path "$folder/build" --product cumulus >&2)
    echo "$folder/build/release"
}

echo "building $base" >&2
base_bin=$(build "$base")
echo "building $new" >&2
new_bin=$(build "$new")

stamp=$(date -u +%Y%m%dT%H%M%SZ)
for run in $(seq 1 "$runs"); do
    for side in base new; do
        if [ "$side" = base ]; then bin=$base_bin; else bin=$new_bin; fi
        log="$out/runs/$stamp-$side-$run.md"
        echo "run $run of $runs: $side (${arguments[*]:-all})" >&2
        # `--only requests` finds `cumulus` beside the benchmark it runs.
        (cd "$bin" && ./CumulusBenchmarks "${arguments[@]}") >"$log"
    done
done

python3 - "$out/runs" "$stamp" "$runs" "$base" "$new" <<'PYTHON'
import re, statistics, sys
from pathlib import Path

folder, stamp, runs, base_name, new_name = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
number = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

def rows(path):
    """Each table row's name and its figures in order, each named by its column's heading (and its place in the cell
    when a cell holds several numbers); 1,234 is one number."""
    found, headings = {}, []
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[1]) <= set("-:"):
            continue
        if cells[0] in ("benchmark", "body (16 MiB) to `public/records/query`") or cells[0].startswith("well-behaved"):
            headings = cells
            continue
        figures = []
        for column, cell in enumerate(cells[1:], start=1):
            numbers = [float(text.replace(",", "")) for text in number.findall(cell)]
            heading = headings[column] if column < len(headings) else f"column {column + 1}"
            for place, value in enumerate(numbers):
                figures.append((heading if len(numbers) == 1 else f"{heading} #{place + 1}", value))
        found[cells[0]] = figures
    return found

sides = {side: [rows(folder / f"{stamp}-{side}-{run}.md") for run in range(1, runs + 1)] for side in ("base", "new")}
names = [name for name in sides["base"][0] if all(name in run for side in sides.values() for run in side)]
print(f"| benchmark | figure | {base_name} (median of {runs}) | {new_name} (median of {runs}) | new / base |")
print("|---|---|---:|---:|---:|")
for name in names:
    shapes = {tuple(label for label, _ in run[name]) for side in sides.values() for run in side}
    if len(shapes) != 1:
        print(f"| {name} | — | the runs printed different figures | | |")
        continue
    for index, label in enumerate(shapes.pop()):
        values = {side: [run[name][index][1] for run in sides[side]] for side in sides}
        if len(set(values["base"] + values["new"])) == 1:
            continue  # a figure every run printed alike (a count of records): nothing to compare
        medians = [statistics.median(values[side]) for side in ("base", "new")]
        ratio = f"{medians[1] / medians[0]:.3f}" if medians[0] else "—"
        spread = " ".join(f"{value:g}" for value in values["base"]) + " / " + " ".join(f"{value:g}" for value in values["new"])
        print(f"| {name} | {label} | {medians[0]:g} | {medians[1]:g} | {ratio} ({spread}) |")
PYTHON
