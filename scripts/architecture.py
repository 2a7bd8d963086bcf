#!/usr/bin/env python3
"""Draws cohort's architecture from the build files, and checks the layering.

The parts are the libraries under src/cohort/, in the order that
src/cohort/CMakeLists.txt adds them: a part may depend only on parts added
before it. Each part's dependencies are read from the DEPS of its
cohort_library() call; the programs (tools/, python/, examples/, bench/) from
the cohort_* libraries their CMakeLists.txt files name.

  python3 scripts/architecture.py          rewrite the picture in README.md
  python3 scripts/architecture.py --check  exit 1 when README.md's picture is
                                           not what the tree says, or a part
                                           depends on a part added after it

The picture goes between `<!-- architecture -->` and `<!-- /architecture -->`
in README.md: a Mermaid flowchart (drawn by GitHub and GitLab, readable as
text elsewhere) with only the direct edges that are not implied by others.
"""

import argparse
import difflib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN = "<!-- architecture -->"
END = "<!-- /architecture -->"
# The programs built on the parts: the directories whose CMakeLists.txt
# files link cohort libraries into executables or the Python module.
PROGRAMS = ["tools", "python", "examples", "bench"]


def part_order():
    """The parts, in the order src/cohort/CMakeLists.txt adds them."""
    text = (ROOT / "src/cohort/CMakeLists.txt").read_text()
    return re.findall(r"add_subdirectory\((\w+)\)", text)


def library_deps(cmake_text, name):
    """The DEPS of cohort_library(name ...), or None when there is none."""
    match = re.search(r"cohort_library\(\s*" + re.escape(name) + r"\b(.*?)\)",
                      cmake_text, re.S)
    if not match:
        return None
    deps = re.search(r"\bDEPS\b(.*)", match.group(1), re.S)
    return set(re.findall(r"\bcohort_(\w+)", deps.group(1))) if deps else set()


def read_graph():
    """Returns (parts, edges): edges[node] = the parts it names directly."""
    parts = part_order()
    edges = {}
    for part in parts:
        cmake = (ROOT / "src/cohort" / part / "CMakeLists.txt").read_text()
        deps = library_deps(cmake, "cohort_" + part)
        if deps is None:
            sys.exit(f"architecture: src/cohort/{part}/CMakeLists.txt has no "
                     f"cohort_library(cohort_{part} ...)")
        edges[part] = {d for d in deps if d in parts and d != part}
    for program in PROGRAMS:
        named = set()
        for cmake in sorted((ROOT / program).rglob("CMakeLists.txt")):
            named |= set(re.findall(r"\bcohort_(\w+)", cmake.read_text()))
        edges[program] = {d for d in named if d in parts}
    return parts, edges


def layering_errors(parts, edges):
    """A part that depends on a part added after it (an upward import)."""
    rank = {p: i for i, p in enumerate(parts)}
    errors = []
    for part in parts:
        for dep in sorted(edges[part]):
            if rank[dep] > rank[part]:
                errors.append(
                    f"src/cohort/{part} depends on src/cohort/{dep}, which "
                    f"src/cohort/CMakeLists.txt adds after it: move the code, "
                    f"or reorder the parts if the design changed")
    return errors


def reachable(edges, start):
    seen, stack = set(), list(edges.get(start, ()))
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    return seen


def reduced(edges):
    """Drops each edge a->b that another path a->c->...->b already implies."""
    out = {}
    for node, deps in edges.items():
        implied = set()
        for dep in deps:
            implied |= reachable(edges, dep)
        out[node] = sorted(deps - implied)
    return out


def picture(parts, edges):
    direct = reduced(edges)
    lines = [BEGIN, "```mermaid", "flowchart TD"]
    for program in PROGRAMS:
        lines.append(f'  {program}["{program}/"]')
    for part in parts:
        lines.append(f'  {part}["src/cohort/{part}"]')
    for node in PROGRAMS + list(reversed(parts)):
        for dep in direct[node]:
            lines.append(f"  {node} --> {dep}")
    lines += ["```", "",
              "*Generated from the build files by `scripts/architecture.py`; "
              "an arrow is a direct dependency not implied by another path. "
              "A ctest check fails when this picture and the tree differ.*",
              END]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="fail instead of rewriting README.md")
    args = parser.parse_args()
    parts, edges = read_graph()
    errors = layering_errors(parts, edges)
    for error in errors:
        print("architecture: " + error, file=sys.stderr)
    text = README.read_text()
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        sys.exit(f"architecture: README.md has no {BEGIN} ... {END} block")
    old = text[begin:end + len(END)]
    new = picture(parts, edges)
    if args.check:
        if old != new:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True),
                "README.md", "scripts/architecture.py"))
            print("\narchitecture: README.md's picture is not the tree's; "
                  "run python3 scripts/architecture.py", file=sys.stderr)
            return 1
        return 1 if errors else 0
    README.write_text(text[:begin] + new + text[end + len(END):])
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
