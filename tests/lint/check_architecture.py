"""docs/architecture.md lists every source file: each file under src/dtrain (and
python/dtrain) must be named in the section of its folder, a '### ' heading that names the
folder (or a parent of it: the longest such wins), by its path from that folder, either
whole (`group.h`) or as a header/source pair (`group.h/.cpp`). Prints every missing file
and exits 1 if there is one, so a new file cannot land without its line in the map.

    python3 tests/lint/check_architecture.py [ROOT]
"""
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".cpp", ".h", ".cu", ".py"}


def sections(doc):
    """(folders named in the heading, the section's text) for every '### ' section."""
    out = []
    for block in re.split(r"^### ", doc, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        folders = re.findall(r"(?:src/dtrain|python/dtrain)(?:/[\w]+)*", heading)
        out.append((folders, body))
    return out


def listed(rel, text):
    """Whether `rel` (a path from the section's folder) is named in `text`."""
    before = r"(?<![\w/.])"
    names = [re.escape(rel)]
    stem, dot, ext = rel.rpartition(".")
    if dot and "." + ext in (".h", ".cpp"):
        names.append(re.escape(stem) + r"\.h/\.cpp")
    return any(re.search(before + n + r"(?![\w])", text) for n in names)


def main(root):
    root = pathlib.Path(root)
    doc = (root / "docs/architecture.md").read_text()
    secs = sections(doc)
    missing = []
    files = [p for base in ("src/dtrain", "python/dtrain") for p in (root / base).rglob("*")
             if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts]
    for path in sorted(files):
        rel_to_root = path.relative_to(root).as_posix()
        best = None
        for folders, body in secs:
            for folder in folders:
                if rel_to_root.startswith(folder + "/") and (best is None or len(folder) > len(best[0])):
                    best = (folder, body)
        if best is None:
            missing.append(f"{rel_to_root}: no '### ' section of docs/architecture.md names its folder")
        elif not listed(rel_to_root[len(best[0]) + 1:], best[1]):
            missing.append(f"{rel_to_root}: not listed in the section of {best[0]}")
    for m in missing:
        print(m)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
