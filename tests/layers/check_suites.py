#!/usr/bin/python3
"""Every test class of an end-to-end file that tests/CMakeLists.txt registers suite by suite
(`foreach(suite A B C) ... e2e/test_X.py ... ${suite}`) is one of those suites: a class left out
of the list would never run, and nothing would say so.
Usage: check_suites.py SOURCE_ROOT   (the repository root)"""
import ast
import os
import re
import sys


def test_classes(path):
    """The classes of `path` that define test_ methods."""
    tree = ast.parse(open(path).read(), path)
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef) and any(
        isinstance(item, ast.FunctionDef) and item.name.startswith("test_") for item in node.body)}


def main(root):
    cmake = open(os.path.join(root, "tests", "CMakeLists.txt")).read()
    loops = re.findall(r"foreach\(suite ([^)]*)\)(.*?)endforeach\(\)", cmake, re.S)
    missing, files = [], 0
    for suites, body in loops:
        script = re.search(r"e2e/(test_\w+\.py)", body)
        if not script:
            continue
        files += 1
        registered = set(suites.split())
        for name in sorted(test_classes(os.path.join(root, "tests", "e2e", script.group(1))) - registered):
            missing.append(f"{script.group(1)}: {name}")
    if missing:
        print("test classes that no ctest test runs (add them to their foreach(suite ...) in "
              "tests/CMakeLists.txt):\n  " + "\n  ".join(missing))
        return 1
    print(f"every test class of the {files} files registered suite by suite runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
