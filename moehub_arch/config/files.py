"""Reading a configuration's files: the error every bad input raises (ConfigError), how messages
show a path, and strict YAML reading (duplicate keys refused). Shared by the config loader
(loader.py) and the model files a config names (models.py), below both.
"""
from pathlib import Path

import yaml

from ..errors import UserError
from ..inputs import InputFileError, load_yaml, read_text


class ConfigError(UserError):
    """A user error in a configuration: one paragraph naming file, key path, expected and found."""

    exit_code = 2

    def __init__(self, message: str, file: str | None = None, key: str | None = None):
        super().__init__(message)
        self.file = file
        self.key = key


def display_path(path: Path) -> str:
    """A path as messages show it: relative to the working directory when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _Duplicate(key, key_node.start_mark.line + 1, seen[key])
        seen[key] = key_node.start_mark.line + 1
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


class _Duplicate(Exception):
    def __init__(self, key, line, first_line):
        super().__init__(key)
        self.key, self.line, self.first_line = key, line, first_line


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: Path):
    """The YAML data of a config or model file; any problem is a ConfigError naming the file
    (and line)."""
    shown = display_path(path)
    try:
        text = read_text(path, "config file", shown)
        return load_yaml(text, shown, "config file", _StrictLoader)
    except InputFileError as e:
        raise ConfigError(str(e), shown) from None
    except _Duplicate as e:
        raise ConfigError(f"{shown}:{e.line}: key '{e.key}' appears twice in one mapping (first "
                          f"on line {e.first_line}); YAML would silently keep only the last",
                          shown) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        ctx = getattr(e, "context", None)
        raise ConfigError(f"{where}: YAML syntax error: {problem}" + (f" ({ctx})" if ctx else ""),
                          shown) from None
