"""MkDocs hooks (mkdocs.yml `hooks:`): the pages of the documentation site that are generated from
the code at build time, so that they cannot drift from it.

- `reference/*.md`: the output of `moehub-sim blocks`, `config --list`, `isa`, `stats --list` and
  every subcommand's `--help`, run in this process (no simulation runs: the whole build takes
  seconds);
- `schemes/<name>.md` for every module of `moehub_arch/workloads/schemes/`: its docstring, its
  kernel files and the shipped configs that use it, and its speedup figure from the MoE-Hub
  paper's grid where the grid has it;
- `figures/generated/*.png`: the comparisons the pages show, drawn as `moehub-sim plot TABLE.md` does
  (moehub_arch/analysis/tables.py) from the result tables shipped in the repository.

Pages listed in OPTIONAL may be absent (other branches add them); the nav entry of an absent one
is dropped instead of failing the strict build. Any other missing page or broken link fails it.
"""
import ast
import contextlib
import io
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = {"engine_order.md", "blackwell.md"}
# result tables shipped in the repository -> the prefix of their figures under figures/generated/
TABLES = {ROOT / "tools" / "figures" / "moehub_paper_grid.md": "",
          ROOT / "docs" / "systems" / "dysharp.md": "dysharp_"}
STATS_CONFIG = "configs/experiments/functional.yaml"


def _drop_absent(nav, docs_dir):
    out = []
    for item in nav:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _drop_absent(value, docs_dir)
                if value:
                    out.append({title: value})
                continue
            if value in OPTIONAL and not (docs_dir / value).is_file():
                continue
        out.append(item)
    return out


def on_config(config):
    config.nav = _drop_absent(config.nav, Path(config.docs_dir))
    return config


def _cli(*argv):
    """stdout of `moehub-sim ARGV`, run in this process; paths under the checkout made relative."""
    from moehub_arch.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            status = main(list(argv))
        except SystemExit as e:      # argparse's --help
            status = e.code
    if status not in (0, None):
        raise RuntimeError(f"moehub-sim {' '.join(argv)} exited with status {status}")
    return buf.getvalue().replace(str(ROOT) + "/", "")


def _page(title, intro, command, text):
    return (f"# {title}\n\n{intro}\n\nGenerated at build time from `moehub-sim {command}`.\n\n"
            f"```text\n{text.rstrip()}\n```\n")


def _stats_text():
    """The stats of the functional MoE layer's config, with instance numbers folded (gpu0, gpu1 ...
    -> gpuN): one line per kind of stat."""
    seen, out = set(), []
    for line in _cli("stats", "--list", STATS_CONFIG).splitlines():
        name, _, rest = line.partition("  ")
        folded = re.sub(r"(?<=[a-z_])\d+(?=\.|$)", "N", name)
        if folded not in seen:
            seen.add(folded)
            out.append(f"{folded}  {rest}")
    return "\n".join(out)


def _commands_text():
    from moehub_arch.cli import _parser
    parts = [_cli("--help")]
    sub = next(a for a in _parser()._actions if a.dest == "command")
    for name in sub.choices:
        parts.append(f"$ moehub-sim {name} --help\n" + _cli(name, "--help"))
    return "\n\n".join(parts)


def reference_pages():
    """{path under docs/: Markdown} of the generated reference pages."""
    return {
        "reference/commands.md": _page(
            "Commands", "Every `moehub-sim` subcommand and its options.", "--help",
            _commands_text()),
        "reference/blocks.md": _page(
            "Hardware blocks", "What each hardware block declares in its module "
            "(`moehub_arch/components/`): parameters with config key, unit and source; record "
            "fields; stats; events; timers; checks; debug flags. See "
            "[Adding a block](../adding_a_block.md).", "blocks", _cli("blocks")),
        "reference/config.md": _page(
            "Config keys", "Every config key with its type, default, unit and description, and "
            "its value in the default configuration with the file that set it and the public "
            "source (or `assumption:`) that file cites. `moehub-sim config --list PATTERN "
            "[--config FILE]` prints the same for a pattern and a config of yours.",
            "config --list", _cli("config", "--list")),
        "reference/isa.md": _page(
            "Instruction set", "The instruction set as the shipped `isa/*.yaml` files define "
            "it, with costs evaluated for the default system (DGX H100) and the file and line "
            "of each instruction. See [Instruction set as data](../concepts/isa.md).", "isa",
            _cli("isa")),
        "reference/stats.md": _page(
            "Stats", f"Every stat an MoE layer run produces (`{STATS_CONFIG}`), with unit and "
            "description; instance numbers are folded (`gpuN`, `smN`, `nvlinkN`). `moehub-sim "
            "stats --list CONFIG [PATTERN]` lists a config's own.",
            f"stats --list {STATS_CONFIG}", _stats_text()),
    }


def _docstring_markdown(doc):
    """A module docstring as Markdown: paragraphs with indented lines (tables of kernels, steps)
    as text blocks, the others as prose."""
    out = []
    for para in doc.strip().split("\n\n"):
        lines = para.splitlines()
        if any(line.startswith("  ") for line in lines[1:]) and not lines[0].startswith("- "):
            out.append("```text\n" + para + "\n```")
        else:   # brackets are array shapes ([E][C][H]), not Markdown references
            pieces = para.split("`")     # outside code spans only
            out.append("`".join(p if i % 2 else p.replace("[", "\\[").replace("*", "\\*")
                                for i, p in enumerate(pieces)))
    return "\n\n".join(out)


def scheme_pages(figures):
    """{path: Markdown} of one page per MoE scheme module; `figures` maps a baseline to the path
    (under docs/) of its speedup figure."""
    pages = {}
    folder = ROOT / "moehub_arch" / "workloads" / "schemes"
    configs = sorted((ROOT / "configs").rglob("*.yaml"))
    for path in sorted(folder.glob("*.py")):
        name = path.stem
        if name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        kernels = sorted(p.relative_to(ROOT).as_posix()
                         for p in (ROOT / "workloads" / "kernels" / name).glob("*.s"))
        pattern = re.compile(rf"^\s*scheme:\s*{re.escape(name)}\s*(#.*)?$", re.M)
        using = [p.relative_to(ROOT).as_posix() for p in configs if pattern.search(p.read_text())]
        parts = [f"# Scheme `{name}`", _docstring_markdown(doc),
                 f"Module: `moehub_arch/workloads/schemes/{name}.py`."]
        if kernels:
            parts.append("Kernels: " + ", ".join(f"`{k}`" for k in kernels) + ".")
        if using:
            parts.append("Shipped configs that select it: " + ", ".join(f"`{u}`" for u in using[:12])
                         + (f" and {len(using) - 12} more" if len(using) > 12 else "") + ".")
        parts.append(f"Run it on any model and token count: `moehub-sim layer --model "
                     f"qwen3_30b_a3b --tokens 512 --scheme {name} --system hgx_h800` "
                     "([Layer experiments by name](../layer.md)).")
        if name in figures:
            parts.append(f"MoE-Hub's speedup over `{name}` in the MoE-Hub paper's grid as "
                         f"simulated here ([the grid](index.md)):\n\n"
                         f"![speedup over {name}](../{figures[name]})")
        pages[f"schemes/{name}.md"] = "\n\n".join(parts) + "\n"
    return pages


def figure_files():
    """{path under docs/: PNG bytes} of the figures drawn from the shipped result tables."""
    from moehub_arch.analysis.tables import table_figures
    return {f"figures/generated/{prefix}{name}": png
            for path, prefix in TABLES.items() for name, png in table_figures(path).items()}


def on_files(files, config):
    pngs = figure_files()
    per_baseline = {}
    for path in pngs:
        m = re.match(r"figures/generated/speedup_vs_(\w+)\.png$", path)
        if m:
            per_baseline[m.group(1)] = path
    generated = dict(reference_pages())
    for path, text in scheme_pages(per_baseline).items():
        if files.get_file_from_path(path) is None:      # a hand-written page wins
            generated[path] = text
    for path, content in list(generated.items()) + list(pngs.items()):
        files.append(File.generated(config, path, content=content))
    return files
