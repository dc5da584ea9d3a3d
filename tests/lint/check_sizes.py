"""Size limits of the sources: no file under src/ over 450 lines, no function outside
src/dtrain/cli over 80 lines (from its signature's first line to its closing brace's line).
Functions are found by matching braces outside comments, strings and characters: a brace
opens a function body when the text before it ends with a parameter list (')', optionally
followed by const, noexcept, override, a trailing return type or a constructor's member
initializers). Prints every violation and exits 1 if there is one.

    python3 tests/lint/check_sizes.py [ROOT]
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80


def strip_code(text):
    """Comments, string and character literals blanked out (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNCTION_HEAD = re.compile(
    r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s*&]+)?$"
    r"|\)\s*:\s*[\w:]+[({].*$",
    re.S)


def signature_lines(head):
    """Lines of a function's head that belong to its signature: the trailing run of
    non-blank lines that are not preprocessor lines, less one (the brace's own line)."""
    lines = head.split("\n")
    n = 0
    for text in reversed(lines[:-1]):
        if not text.strip() or text.lstrip().startswith("#"):
            break
        n += 1
    return n


def functions(code):
    """(first line, last line, head) of every function body in stripped code, from the
    signature's first line."""
    found, stack = [], []
    line = 1
    last_stop = 0
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            head = code[last_stop:i].strip()
            is_function = bool(FUNCTION_HEAD.search(head)) and not re.search(
                r"\b(if|for|while|switch|catch)\s*\(", head.split("\n")[-1])
            first = line - signature_lines(code[last_stop:i])
            stack.append((first, is_function and not any(f for _, f, _ in stack), head))
            last_stop = i + 1
        elif c == "}":
            if stack:
                start, is_function, head = stack.pop()
                if is_function:
                    found.append((start, line, head.split("\n")[-1].strip()[:70]))
            last_stop = i + 1
        elif c == ";":
            last_stop = i + 1
    return found


def main(root):
    problems = []
    for path in sorted(pathlib.Path(root, "src").rglob("*")):
        if path.suffix not in (".cpp", ".h", ".cu"):
            continue
        text = path.read_text()
        rel = path.relative_to(root)
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {lines} lines (limit {MAX_FILE_LINES})")
        if "src/dtrain/cli/" in str(rel).replace("\\", "/"):
            continue
        for first, last, head in functions(strip_code(text)):
            if last - first + 1 > MAX_FUNCTION_LINES:
                problems.append(f"{rel}:{first}: a function of {last - first + 1} lines "
                                f"(limit {MAX_FUNCTION_LINES}): {head}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
