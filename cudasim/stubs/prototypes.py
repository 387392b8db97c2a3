"""Reads function prototypes out of preprocessed C/C++ header text (see generate_stubs.py)."""
import re


def _balanced(text, start):
    """Index just past the parenthesis group opening at text[start] ('('), or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def find_prototypes(text, names):
    """{name: (return type, parameter list)} for each of `names` declared (not defined) in `text`."""
    wanted = set(names)
    found = {}
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", text):
        name = match.group(1)
        if name not in wanted or name in found:
            continue
        open_paren = match.end() - 1
        close = _balanced(text, open_paren)
        if close < 0:
            continue
        rest = text[close:].lstrip()
        if not rest.startswith(";"):
            continue  # a call, a definition or a macro use, not a declaration
        head_start = max(text.rfind(c, 0, match.start()) for c in ";{}") + 1
        head = text[head_start:match.start()]
        head = re.sub(r'\bextern\s*"C"', " ", head)
        head = re.sub(r"\b(extern|static|inline|__inline__)\b", " ", head)
        head = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", head, flags=re.S)
        head = " ".join(head.split())
        if not head or "(" in head or head.startswith(("#", "template", "typedef")):
            continue
        params = " ".join(text[open_paren + 1:close - 1].split())
        found[name] = (head, params)
    return found
