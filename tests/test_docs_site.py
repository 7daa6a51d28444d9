"""The documentation site builds with `mkdocs build --strict` (mkdocs.yml: a broken link, a missing
page or a page left out of the navigation fails it), its reference pages generated from the code
(tools/docs_hooks.py: no simulation runs, the build takes seconds), and a broken link does fail it."""
import os
import shutil
import subprocess
import sys

import yaml

from conftest import REPO


def _build(config, site):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)


def test_site_builds_strict_with_generated_reference(tmp_path):
    r = _build(REPO / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    site = tmp_path / "site"
    config = (site / "reference" / "config" / "index.html").read_text()
    assert "system.nvlink.bandwidth" in config and "dgx_h100.yaml" in config
    assert "mma.bf16" in (site / "reference" / "isa" / "index.html").read_text()
    assert "system.gpuN.hub.tx_packets" in (site / "reference" / "stats" / "index.html").read_text()
    assert "rpm" in (site / "reference" / "blocks" / "index.html").read_text()
    assert "moehub-sim layer" in (site / "reference" / "commands" / "index.html").read_text()
    for scheme in ("deepep", "megatron", "tutel", "overlap", "nvls", "dysharp", "hiermoe"):
        assert (site / "schemes" / scheme / "index.html").is_file(), scheme
    assert (site / "figures" / "generated" / "speedup_vs_deepep.png").read_bytes()[:4] == b"\x89PNG"
    assert "moehub_arch.api.run" in (site / "api" / "index.html").read_text()   # mkdocstrings


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    with open(REPO / "mkdocs.yml") as f:
        config = yaml.safe_load(f)
    config["docs_dir"] = str(tmp_path / "docs")
    config["hooks"] = [str(REPO / h) for h in config["hooks"]]
    config["plugins"] = ["search"]           # no API page rendering needed here
    page = tmp_path / "docs" / "api.md"
    page.write_text(page.read_text().split("::: moehub_arch.api")[0]
                    + "\nSee [the missing page](no_such_page.md).\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    r = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert r.returncode != 0
    assert "no_such_page.md" in r.stderr


def test_readme_links_and_picture_exist():
    import re
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    targets = re.findall(r"\]\(([^)#]+)\)", text)
    assert len(targets) >= 15
    for t in targets:
        if not t.startswith("http"):
            assert (REPO / t).is_file(), t
