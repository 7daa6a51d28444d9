"""Reading the text files users give us, whatever state they are in.

Every text input (configs, models, ISA files, kernel assembly, sweep files, reference files,
JSON files we wrote earlier and read back) goes through `read_text`, and every YAML document
through `load_yaml`, so that a corrupt file ends in one clear paragraph naming it (exit status 2)
instead of a traceback:

- **encoding**: a byte-order mark decides (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE, as editors on
  Windows save them); without one the file must be UTF-8. Anything else (Latin-1, UTF-16 without
  a mark, a binary file) is refused with the line and column of the first byte that is not UTF-8,
  never guessed: a guessed encoding silently changes names and numbers.
- **size**: text inputs over `MAX_TEXT_BYTES` are refused before they are parsed (assumption:
  64 MiB; the largest shipped input, a kernel or the base ISA, is tens of KB, and PyYAML parses
  about 1 MB/s, so a bigger file is a mistake - a data file given as a config - not a config).
- **YAML alias bombs** ("billion laughs": a few lines of `&a [*b, *b, ...]` that expand to
  billions of nodes when walked) and **recursive aliases** (`&a [*a]`): the document's node graph
  is measured with aliases expanded (linear time, before anything is built) and refused above
  `MAX_YAML_NODES` (assumption: 2 million; the largest shipped YAML file expands to under 10 000).
- **nesting** deeper than Python's recursion limit: refused, not a RecursionError.
"""
import codecs
from pathlib import Path

import yaml

from .errors import UserError

MAX_TEXT_BYTES = 64 * 2 ** 20
MAX_YAML_NODES = 2_000_000

# longest first: the UTF-32 LE mark begins with the UTF-16 LE one
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32 LE"), (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32 BE"),
         (codecs.BOM_UTF8, "utf-8", "UTF-8"), (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 LE"),
         (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 BE"))


class InputFileError(UserError):
    """A file that cannot be read or decoded (exit status 2); callers re-raise it as their own
    error class (ConfigError, IsaError, ...) when they have one."""

    exit_code = 2


def _mb(n):
    return f"{n / 2 ** 20:.1f} MiB"


def _line_col(data, offset):
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, col


def decode(data, shown, what):
    """Text of the bytes `data` of file `shown` (see the module docstring); InputFileError."""
    for bom, codec, name in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec)
            except UnicodeDecodeError as e:
                raise InputFileError(
                    f"{shown}: cannot read the {what}: it starts with a {name} byte-order mark but "
                    f"is not valid {name} ({e.reason} at byte {e.start + len(bom)}); save it again "
                    f"as UTF-8") from None
    nul = data.find(b"\x00")
    try:
        text = data.decode("utf-8")
        bad = None
    except UnicodeDecodeError as e:
        bad = e.start
    if nul >= 0 and (bad is None or nul < bad):
        line, col = _line_col(data, nul)
        raise InputFileError(
            f"{shown}:{line}:{col}: cannot read the {what}: it contains NUL bytes (a binary file, "
            f"or text in UTF-16/32 without a byte-order mark); save it as UTF-8 (UTF-16 and "
            f"UTF-32 are read when the file starts with a byte-order mark)")
    if bad is not None:
        line, col = _line_col(data, bad)
        kind = ("a binary file" if nul >= 0 or bad < 4 else "text in another encoding (e.g. Latin-1)")
        raise InputFileError(
            f"{shown}:{line}:{col}: cannot read the {what}: byte 0x{data[bad]:02x} is not "
            f"UTF-8 ({kind}); save it as UTF-8 (UTF-16 and UTF-32 are read when the file starts "
            f"with a byte-order mark)")
    return text


def read_text(path, what, shown=None, max_bytes=MAX_TEXT_BYTES):
    """The decoded text of `path` (a `what` such as "config file"); InputFileError naming the
    file (`shown`, default the path) for a missing, unreadable, oversized or undecodable file."""
    path = Path(path)
    shown = str(path) if shown is None else shown
    try:
        size = path.stat().st_size
        if path.is_file() and size > max_bytes:
            raise InputFileError(f"{shown}: the {what} is {_mb(size)}; a {what} larger than "
                                 f"{_mb(max_bytes)} is refused (is it the right file?)")
        data = path.read_bytes()
    except OSError as e:
        reason = e.strerror or str(e)
        if isinstance(e, IsADirectoryError):
            reason = "it is a directory"
        raise InputFileError(f"{shown}: cannot read the {what} ({reason})") from None
    return decode(data, shown, what)


def _expanded_nodes(node, memo, active, limit):
    """Nodes of a composed YAML graph with every alias expanded (memoized: linear time)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise _Recursive(node)
    active.add(key)
    n = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            n += _expanded_nodes(child, memo, active, limit)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            n += _expanded_nodes(k, memo, active, limit) + _expanded_nodes(v, memo, active, limit)
    active.discard(key)
    memo[key] = n
    if n > limit:
        raise _TooBig(node)
    return n


class _Recursive(Exception):
    def __init__(self, node):
        super().__init__()
        self.node = node


class _TooBig(_Recursive):
    pass


def load_yaml(text, shown, what, loader=yaml.SafeLoader, max_nodes=MAX_YAML_NODES,
              with_node=False):
    """The YAML document in `text` (None for an empty one), built with `loader` after its node
    graph was checked for alias bombs, recursive aliases and excessive nesting; with `with_node`,
    (document, root node), for a caller that wants the nodes' line numbers too.
    yaml.YAMLError propagates (callers report syntax errors with their own wording)."""
    ld = loader(text)
    try:
        try:
            node = ld.get_single_node()
            if node is None:
                return (None, None) if with_node else None
            _expanded_nodes(node, {}, set(), max_nodes)
        except _TooBig as e:
            m = e.node.start_mark
            raise InputFileError(
                f"{shown}:{m.line + 1}: the {what} expands to more than {max_nodes:,} YAML nodes "
                f"once its aliases (*name) are followed (an 'alias bomb'); refused before "
                f"building it") from None
        except _Recursive as e:
            m = e.node.start_mark
            raise InputFileError(f"{shown}:{m.line + 1}: the {what} has an alias (*name) that "
                                 f"contains itself (a recursive structure)") from None
        except RecursionError:
            raise InputFileError(f"{shown}: the {what} is nested too deeply to read") from None
        try:
            data = ld.construct_document(node)
            return (data, node) if with_node else data
        except RecursionError:
            raise InputFileError(f"{shown}: the {what} is nested too deeply to read") from None
    finally:
        ld.dispose()
