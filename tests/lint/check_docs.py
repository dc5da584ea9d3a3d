"""The docs as a reference: every file in docs/data is cited by name in the docs (README.md or
docs/*.md), so no raw file outlives the table it stood behind; docs/results.md and
docs/limitations.md stay within their sizes; and the docs speak of dtrain and its users,
not of how the work on it was organized. Prints every problem and exits 1 if there is one.

    python3 tests/lint/check_docs.py [ROOT]
"""
import pathlib
import re
import sys

MAX_LINES = {"docs/results.md": 1200, "docs/limitations.md": 150}
# Words about how the work was organized rather than about dtrain (a "process s-ession" of
# setsid is dtrain's). Each is spelled with a bracketed letter so that this file, which
# the same words would otherwise flag, does not use them itself.
ORGANIZATIONAL = re.compile(
    r"(?<!process )\bs[e]ssions?\b|\bl[e]ases?\b|\bl[e]nt\b|\bdevice t[i]me\b|"
    r"\bnot dr[a]wn\b|\bwas dr[a]wn\b|\bnext s[e]ssion\b", re.I)


def main(root):
    root = pathlib.Path(root)
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    text = {p: p.read_text() for p in pages}
    everything = "\n".join(text.values())
    problems = []
    for path in sorted((root / "docs/data").iterdir()):
        if path.is_file() and not re.search(r"(?<![\w.-])" + re.escape(path.name) + r"(?![\w.-])",
                                            everything):
            problems.append(f"docs/data/{path.name}: cited nowhere in README.md or docs/*.md "
                            "(cite it where its table stands, or remove it)")
    for rel, limit in MAX_LINES.items():
        lines = (root / rel).read_text().count("\n")
        if lines > limit:
            problems.append(f"{rel}: {lines} lines (limit {limit})")
    for page, body in text.items():
        for number, line in enumerate(body.split("\n"), 1):
            m = ORGANIZATIONAL.search(line)
            if m:
                problems.append(f"{page.relative_to(root)}:{number}: '{m.group(0)}' speaks of "
                                "how the work was organized, not of dtrain")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
