"""bigbatch.Error: the command line's one-line errors, as a Python exception."""
import re

from . import _engine


class Error(Exception):
    """What the engine refused, and how to fix it.

    ``kind`` is the command line's error kind (``"config"``, ``"plan"``, ``"data"``, ...),
    ``problem`` what was wrong, ``hint`` the fix, spelled for Python (``micro_batch=8``, not
    ``--micro-batch 8``).
    """

    def __init__(self, kind, problem, hint=""):
        self.kind = kind
        self.problem = for_python(problem)
        self.hint = for_python(hint)
        super().__init__(f"{self.problem}; {self.hint}" if self.hint else self.problem)


_OPTIONS = {row["name"]: row for row in _engine.option_rows()}
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?: ([^\s;,()]+))?")
# Words that follow a flag in a sentence rather than as its value ("--lr must be positive").
_PROSE = set("""a above after an and are as at be below beside but by cannot counts does for from
    given goes has have in is it its makes measures must names needs not of on only or says sets
    takes than that the then to too was when which with without would""".split())


def for_python(text):
    """The engine's message with its flags as keywords: '--micro-batch 8' -> 'micro_batch=8'."""

    def keyword(match):
        name, value = match.group(1), match.group(2)
        row = _OPTIONS.get(name)
        if row is None:
            return match.group(0)
        key = name.replace("-", "_")
        if row["switch"]:
            return f"{key}=True" + (f" {value}" if value else "")
        if value is None or value in _PROSE:
            return key + (f" {value}" if value else "")
        if not re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?|'.*'|\".*\"", value):
            value = repr(value)
        return f"{key}={value}"

    return _FLAG.sub(keyword, text)


_engine.set_error_class(Error)
