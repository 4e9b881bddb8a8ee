"""Import circles between the files of src/, following re-exports (`pub use`).

A file that imports from another which imports from it, directly or through other files, is a
circle; a module and its own submodules are one unit (a file's edges to its ancestors and
descendants are left out). Each edge comes from a `use` or from an inline `crate::`/`super::`
path, resolved to the file that defines the name, through `pub use` re-exports. Test modules
(`#[cfg(test)] mod tests`) are left out. Prints each circle with its edges and, last,
"circles: N".

Run: python3 scripts/import-circles.py src
"""

import os
import re
import sys
from collections import defaultdict

Module = tuple[str, ...]


def modules(root: str) -> dict[Module, str]:
    """Every .rs file under `root`, by module path (mod.rs, lib.rs and main.rs name their folder)."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                files[tuple(parts)] = path
    return files


def code(path: str) -> str:
    """A file's code without its test module and comments."""
    text = open(path).read()
    cut = text.find("#[cfg(test)]\nmod tests")
    if cut >= 0:
        text = text[:cut]
    return "\n".join(re.sub(r"//.*", "", line) for line in text.split("\n"))


def expand(prefix: list[str], body: str) -> list[list[str]]:
    """The paths of one `use` tree, e.g. `a::{b, c::{d, e}}`."""
    if "{" not in body:
        return [prefix + [s for s in body.split("::") if s]]
    head, rest = body.split("{", 1)
    rest = rest[: rest.rfind("}")]
    parts, current, depth = [], "", 0
    for ch in rest:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (ch == "{") - (ch == "}")
        current += ch
    if current:
        parts.append(current)
    segments = [s for s in head.split("::") if s]
    return [path for part in parts for path in expand(prefix + segments, part)]


def anchored(
    files: dict[Module, str], module: Module, segments: list[str], child_ok: bool
) -> list[str] | None:
    """A path's segments from the crate root, or None for a path outside the crate."""
    if segments[0] == "crate":
        return segments[1:]
    if segments[0] in ("super", "self"):
        base = list(module)
        while segments and segments[0] in ("super", "self"):
            if segments[0] == "super":
                base = base[:-1]
            segments = segments[1:]
        return base + segments
    if child_ok and (*module, segments[0]) in files:
        return list(module) + segments
    return None


def main(root: str) -> int:
    """Print the circles of `root`; the exit status is 0."""
    files = modules(root)
    texts = {m: code(p) for m, p in files.items()}
    reexports: dict[tuple[Module, str], list[str]] = {}
    uses: dict[Module, list[list[str]]] = defaultdict(list)
    for module, text in texts.items():
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
            for segments in expand([], re.sub(r"\s+", "", m.group(2))):
                full = anchored(files, module, segments, True)
                if full is None:
                    continue
                uses[module].append(full)
                if m.group(1):
                    reexports[(module, full[-1])] = full

    def resolve(full: list[str], depth: int = 0) -> Module | None:
        for k in range(len(full), -1, -1):
            found = tuple(full[:k])
            if found in files:
                if k < len(full) and (found, full[k]) in reexports and depth < 10:
                    return resolve(reexports[(found, full[k])], depth + 1)
                return found
        return None

    edges: dict[Module, set[Module]] = defaultdict(set)
    for module, text in texts.items():
        paths = list(uses[module])
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
            full = anchored(files, module, m.group(1).split("::"), False)
            if full is not None:
                paths.append(full)
        for full in paths:
            target = resolve(full)
            related = target is not None and (
                module[: len(target)] == target or target[: len(module)] == module
            )
            if target is not None and not related:
                edges[module].add(target)

    circles = strongly_connected(list(files), edges)
    for circle in circles:
        print(len(circle), sorted("/".join(m) or "lib" for m in circle))
        for a in circle:
            for b in sorted(edges[a]):
                if b in circle:
                    print("   ", "/".join(a) or "lib", "->", "/".join(b) or "lib")
    print("circles:", len(circles))
    return 0


def strongly_connected(nodes: list[Module], edges: dict[Module, set[Module]]) -> list[list[Module]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[Module, int] = {}
    low: dict[Module, int] = {}
    stack: list[Module] = []
    on: set[Module] = set()
    found: list[list[Module]] = []
    sys.setrecursionlimit(10000)

    def visit(v: Module) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in nodes:
        if v not in index:
            visit(v)
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "src"))
