#!/usr/bin/env python3
"""The modules' include graph points one way: every #include "module/..." goes from a module to
one on a lower layer (docs/design.md, "Modules"). A new module must be placed here, and an
include that points up or sideways fails with the file and line that makes it.

Usage: check_layers.py SOURCE_ROOT   (the repository root)
"""
import pathlib
import re
import sys

# Lowest first. A module may include modules of lower layers only (and itself).
LAYERS = [
    ["core"],
    ["batching", "stats", "runtime", "memory", "console"],
    ["state", "io"],
    ["schedule"],
    ["data", "models", "dist"],
    ["config"],
    ["device", "optim"],
    ["task", "session"],
    ["checkpoint", "report"],
    ["sweep"],
    ["train"],
    ["commands"],
    ["apps"],
]
RANK = {module: rank for rank, modules in enumerate(LAYERS) for module in modules}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def module_of(path, src):
    parts = path.relative_to(src).parts
    return parts[0] if len(parts) > 1 else None


def main():
    root = pathlib.Path(sys.argv[1])
    src = root / "src"
    problems = []
    files = [p for p in src.rglob("*") if p.suffix in (".h", ".cpp")]
    files += [p for p in (root / "apps").rglob("*") if p.suffix in (".h", ".cpp")]
    for path in sorted(files):
        module = "apps" if root / "apps" in path.parents else module_of(path, src)
        if module not in RANK:
            problems.append(f"{path.relative_to(root)}: module '{module}' has no layer in "
                            f"tests/layers/check_layers.py")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1)
            if target == module or target not in RANK and not (src / target).is_dir():
                continue
            if target not in RANK:
                problems.append(f"{path.relative_to(root)}:{number}: module '{target}' has no layer")
            elif RANK[target] >= RANK[module]:
                direction = "sideways" if RANK[target] == RANK[module] else "up"
                problems.append(f"{path.relative_to(root)}:{number}: {module} includes {target}, "
                                f"which is {direction} (layer {RANK[module]} -> {RANK[target]})")
    for problem in problems:
        print(problem)
    edges = len(files)
    if problems:
        print(f"{len(problems)} include(s) against the layering")
        return 1
    print(f"layering holds: {edges} files, {len(RANK)} modules in {len(LAYERS)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
