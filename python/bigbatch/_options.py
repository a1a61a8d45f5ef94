"""Keywords as the command line's options: one option table (the engine's) feeds the flags,
config.toml, ``--help`` and these keywords, so every option of ``bigbatch train`` is a keyword
here with ``-`` spelled ``_``."""
import difflib

from . import _engine

OPTIONS = {row["name"]: row for row in _engine.option_rows()}


def keyword_names(command):
    return sorted(name.replace("-", "_") for name, row in OPTIONS.items() if row[command])


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back to the same double
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a numpy or torch scalar
        return _text(value.item())
    return str(value)


def option_texts(function, keywords, command="train", own=()):
    """[(option name, text)] for `keywords`; a keyword that names no option of `command` (and is
    not one of the function's `own`) is a TypeError naming the nearest one. None leaves an
    option at its default."""
    texts = []
    for key, value in keywords.items():
        if key in own:
            continue
        name = key.replace("_", "-")
        row = OPTIONS.get(name)
        if row is None or not row[command] or "-" in key:
            names = keyword_names(command) + list(own)
            close = difflib.get_close_matches(key.replace("-", "_"), names, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else \
                f"; the keywords are the options of 'bigbatch {command} --help' with '-' as '_'"
            raise TypeError(f"{function}() got an unexpected keyword argument '{key}'{hint}")
        if value is None:
            continue
        texts.append((name, _text(value)))
    return texts
