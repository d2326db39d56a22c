#!/usr/bin/env python3
"""The house rules of the folder tree, checked (run by scripts/test.sh).

1. No import circle between the files of a crate: a file's `crate::`,
   `super::` and `self::` paths (in `use` and inline) are its arrows; a circle
   is a strongly connected set of two or more files.
2. No arrow from a lower crate to a higher one: every workspace crate has a
   layer below; a dependency (normal, dev or build) may only point to a lower
   layer, or to a crate of the same layer that is listed as allowed.

Exit status 1 and the offending files or crates when a rule is broken.
`--self-test` checks that the checker finds a planted circle and a planted
upward arrow (its negative control).
"""

import json
import os
import re
import subprocess
import sys
import tempfile

# Lower number = lower layer. A crate may depend on crates of a lower layer
# only (and on `SAME_LAYER` pairs).
LAYERS = {
    "bakery-core": 0,
    "bakery-sqlite": 1,
    "bakery-postgres": 1,
    "bakery-redis": 1,
    "bakery-etcd": 1,
    "bakery-cassandra": 1,
    "bakery-mongodb": 1,
    "bakery-mysql": 1,
    "bakery-dynamodb": 1,
    "bakery-recipes": 2,
    "bakery-verify": 3,
    "bakery-outbox": 3,
    "bakery-migrate": 3,
    "bakery": 4,
    "bakery-testkit": 5,
    "bakery-bench": 5,
    "bakery-serve": 5,
    "bakery-cli": 6,
}
# The testkit may be a dev-dependency of the crates it tests; dev arrows into
# the testkit are how a backend runs the behaviour suite. The bench lab's
# machine description and figure formats serve other crates' benches.
DEV_ALLOWED = {"bakery-testkit", "bakery", "bakery-bench"}

PATH_RE = re.compile(r"\b(crate|super|self)((?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
USE_RE = re.compile(r"\buse\s+((?:crate|super|self)\b[^;]*);", re.S)
# One pass, so that whichever of a string, a char or a comment starts first wins.
NOISE_RE = re.compile(
    r'r(#*)".*?"\1|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'|//[^\n]*|/\*.*?\*/', re.S
)


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main", "mod"):
        rel = rel[:-1]
    return tuple(rel)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, text):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(text):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(text[start:i])
                start = i + 1
        parts.append(text[start:])
        for part in parts:
            if not part:
                continue
            if "{" in part:
                head, rest = part.split("{", 1)
                walk(prefix + head, rest[: rest.rindex("}")])
            else:
                out.append(prefix + part.split(" as ")[0])

    walk("", tree)
    return out


def inline_modules(text):
    """(name, start, end) of every `mod name { … }` written inside a file."""
    found = []
    for m in re.finditer(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        found.append((m.group(1), m.start(), i))
    return found


def arrows(src):
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(src, path)] = path
    graph = {path: set() for path in files.values()}
    for module, path in files.items():
        text = NOISE_RE.sub(" ", open(path).read())
        inline = inline_modules(text)
        paths = [(m.start(), m.group(0)) for m in PATH_RE.finditer(text)]
        for use in USE_RE.finditer(text):
            paths.extend((use.start(), p) for p in expand_use(use.group(1)))
        for at, ref in paths:
            # `super` inside `mod tests { … }` is the file's own module.
            here = module + tuple(name for name, start, end in inline if start < at < end)
            segments = ref.split("::")
            head, rest = segments[0], segments[1:]
            if head == "crate":
                base = ()
            elif head == "self":
                base = here
            else:
                base = here[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            target = tuple(base) + tuple(s for s in rest if s not in ("*", "self"))
            while target not in files and target:
                target = target[:-1]
            if target in files and files[target] != path:
                graph[path].add(files[target])
    return graph


def circles(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def upward_arrows(root):
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=root
        )
    )
    bad = []
    for package in meta["packages"]:
        name = package["name"]
        if name not in LAYERS:
            bad.append(f"{name}: no layer in scripts/layers.py")
            continue
        for dep in package["dependencies"]:
            target = dep["name"]
            if target not in LAYERS:
                continue
            if LAYERS[target] < LAYERS[name]:
                continue
            if dep.get("kind") == "dev" and target in DEV_ALLOWED:
                continue
            bad.append(f"{name} (layer {LAYERS[name]}) -> {target} (layer {LAYERS[target]})")
    return bad


def source_dirs(root):
    dirs = [os.path.join(root, "src")]
    crates = os.path.join(root, "crates")
    for name in sorted(os.listdir(crates)):
        src = os.path.join(crates, name, "src")
        if os.path.isdir(src):
            dirs.append(src)
    return dirs


def check(root):
    failures = []
    for src in source_dirs(root):
        for group in circles(arrows(src)):
            rel = [os.path.relpath(p, root) for p in group]
            failures.append(f"import circle of {len(rel)} files: " + ", ".join(rel))
    failures.extend(f"upward arrow: {arrow}" for arrow in upward_arrows(root))
    return failures


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "a"))
        open(os.path.join(src, "lib.rs"), "w").write("mod a;\nmod b;\n")
        open(os.path.join(src, "a", "mod.rs"), "w").write(
            'mod c;\nuse crate::b::B;\npub struct A;\nconst U: &str = "x://y"; // "\n'
        )
        open(os.path.join(src, "a", "c.rs"), "w").write("pub struct C;\n")
        open(os.path.join(src, "b.rs"), "w").write(
            "use crate::{a::c::C, x};\nfn f() { crate::a::A; }\npub struct B;\n"
            "mod tests { use super::B; }\n"
        )
        found = circles(arrows(src))
        if found != [[os.path.join(src, "a", "mod.rs"), os.path.join(src, "b.rs")]]:
            print(f"self-test: planted circle not found exactly: {found}")
            return 1
        open(os.path.join(src, "b.rs"), "w").write("pub struct B;\n")
        if circles(arrows(src)):
            print("self-test: a circle found where none is")
            return 1
    LAYERS_SAVED = dict(LAYERS)
    LAYERS["bakery-core"] = 99
    bad = upward_arrows(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    LAYERS.clear()
    LAYERS.update(LAYERS_SAVED)
    if not any("-> bakery-core" in arrow for arrow in bad):
        print("self-test: a planted upward arrow was not found")
        return 1
    print("self-test: the planted circle and upward arrow were found")
    return 0


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--self-test" in sys.argv:
        return self_test()
    failures = check(root)
    for failure in failures:
        print(failure)
    if failures:
        return 1
    print("layers: no import circle between files, no arrow from a lower crate to a higher")
    return 0


if __name__ == "__main__":
    sys.exit(main())
