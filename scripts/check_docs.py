#!/usr/bin/env python3
"""Checks that the documentation stands on the repository alone.

  1. docs/README.md links every document in docs/;
  2. every relative link in README.md and docs/*.md names a file or
     directory that exists;
  3. no tracked file points outside the repository: no "../shared" or
     "/work/" path, and none of the external design notes by name (the
     notes the code cites are docs/architecture.md and the area docs).

Exit status 1 with one line per problem; run by ctest as docs.links.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Names of notes that live outside the repository, split so that this file
# does not match itself.
OUTSIDE = [
    "../" + "shared", "/work" + "/", "DESIGN" + ".md", "runtime_training" + ".md",
    "resolver_semantics" + ".md", "tf_runtime" + ".md", "peers" + ".md",
    "STYLE" + ".md", "bench" + "-peers", "peer" + " kit",
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def doc_files():
    return sorted((ROOT / "docs").glob("*.md"))


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p]


def main():
    problems = []
    index = (ROOT / "docs/README.md").read_text()
    for doc in doc_files():
        if doc.name != "README.md" and f"]({doc.name})" not in index:
            problems.append(f"docs/README.md does not link docs/{doc.name}")
    for md in [ROOT / "README.md"] + doc_files():
        for target in LINK.findall(md.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            if not (md.parent / target).exists():
                problems.append(f"{md.relative_to(ROOT)} links {target}, "
                                f"which does not exist")
    for path in tracked_files():
        if path == pathlib.Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for name in OUTSIDE:
                if name in line:
                    problems.append(
                        f"{path.relative_to(ROOT)}:{number} names {name!r}, "
                        f"outside the repository: cite docs/ instead")
    for problem in problems:
        print("check_docs: " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
