"""The documentation tells the truth about the code: the generated CLI reference is current, every flag and exit code
the CLI defines is documented, and every relative link (and its #anchor) resolves.

When a test here fails after a flag or an exit code changed, regenerate the reference: `python -m trtwarm.cli.reference`
from the checkout, and commit the result.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from trtwarm.cli import reference
from trtwarm.cli.helptext import long_options, subcommands
from trtwarm.cli.main import _parser
from trtwarm.errors import EXIT_MEANINGS, exit_table

CLI = ROOT / "docs" / "cli.md"
LINKED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "helm" / "trtwarm" / "README.md",
          ROOT / "deploy" / "README.md"]
HINT = f"the generated CLI reference is stale: run `{reference.REGENERATE}` from the checkout and commit the result"


def test_the_generated_blocks_are_what_the_code_renders_now() -> None:
    assert reference.stale(ROOT, _parser()) == {}, HINT


def test_regenerating_rewrites_a_stale_block_and_only_the_block(tmp_path: Path) -> None:
    for rel in ("docs/cli.md", "README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    cli = tmp_path / "docs" / "cli.md"
    cli.write_text(cli.read_text().replace("| 4 | build failed", "| 4 | build exploded"))
    assert reference.main(["--check", "--root", str(tmp_path)]) == 1
    assert reference.main(["--root", str(tmp_path)]) == 0
    assert cli.read_text() == CLI.read_text() and reference.main(["--check", "--root", str(tmp_path)]) == 0


def _walk(parser, words=()):  # noqa: ANN001, ANN202
    for name, sub in subcommands(parser).items():
        yield (*words, name), sub
        yield from _walk(sub, (*words, name))


def _command_section(text: str, words: tuple[str, ...]) -> str:
    match = re.search(r"^#### `trtwarm " + re.escape(" ".join(words)) + r"[ `].*?(?=^#|\Z)", text, re.M | re.S)
    assert match, f"docs/cli.md has no section for `trtwarm {' '.join(words)}`; {HINT}"
    return match[0]


def test_every_flag_of_every_command_is_in_the_reference() -> None:
    text = CLI.read_text()
    init_flags = {flag for flag, _ in long_options(subcommands(_parser())["init"])}
    for words, sub in _walk(_parser()):
        if subcommands(sub):
            continue
        section = _command_section(text, words)
        flags = {flag for flag, _ in long_options(sub)}
        if init_flags <= flags and words != ("init",):  # key, warm: "every flag of trtwarm init"
            assert "every flag of `trtwarm init`" in section
            flags -= init_flags
        missing = {f for f in flags if f"| `{f}` |" not in section}
        assert not missing, (words, missing, HINT)


def test_every_exit_code_is_in_the_reference_and_the_readme() -> None:
    defined = {code for code, _cls, _hint in exit_table()} | {0, 1}
    assert defined <= set(EXIT_MEANINGS), "an exit code of errors._EXITS has no meaning in EXIT_MEANINGS"
    for path in (CLI, ROOT / "README.md"):
        rows = {int(c) for c in re.findall(r"^\| (\d+) \| ", path.read_text(), re.M)}
        assert set(EXIT_MEANINGS) <= rows, (path.name, set(EXIT_MEANINGS) - rows, HINT)


def test_the_readme_s_main_flags_exist() -> None:
    every = {flag for _words, sub in _walk(_parser()) for flag, _ in long_options(sub)}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Main flags"):readme.index("\n## ", readme.index("## Main flags") + 3)]
    named = set(re.findall(r"`(--[a-z0-9-]+)", section))
    assert named and named <= every, named - every


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _unfenced(text: str) -> str:
    """*text* without fenced code blocks (their ``# comments`` are no headings)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _outside_code(text: str) -> str:
    """*text* without fenced code blocks and inline code, where a ``[x](y)`` is not a link."""
    return re.sub(r"`[^`\n]*`", "", _unfenced(text))


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", _unfenced(path.read_text()), re.M)
    return {_slug(h) for h in headings}


def _links(path: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", _outside_code(path.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto:, file: are not checked here


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for link in _links(path):
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        if not resolved.exists() or ROOT.resolve() not in (resolved, *resolved.parents):
            broken.append(f"{link}: no such file in the checkout")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{link}: no heading #{anchor} in {resolved.relative_to(ROOT.resolve())}")
    assert not broken, broken


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## The volume layout (a contract)\n\n[ok](#the-volume-layout-a-contract) "
                                   "[bad](#nowhere) [gone](b.md) `[code](c.md)`\n```\n[fenced](d.md)\n```\n")
    assert _links(tmp_path / "a.md") == ["#the-volume-layout-a-contract", "#nowhere", "b.md"]
    assert _anchors(tmp_path / "a.md") == {"top", "the-volume-layout-a-contract"}


def _readme_k8s_quick_start() -> tuple[dict, list[str]]:
    """The values of the README's Kubernetes quick start (its heredoc) and the command lines after it."""
    import yaml

    text = (ROOT / "README.md").read_text()
    block = re.search(r"cat > quick-start-cpu\.yaml <<'YAML'\n(.*?)\nYAML\n(.*?)```", text, re.S)
    assert block, "the README's Kubernetes quick start has no quick-start-cpu.yaml heredoc"
    return yaml.safe_load(block[1]), [line.split("  #")[0].strip() for line in block[2].splitlines() if line.strip()]


def test_the_readme_kubernetes_quick_start_renders_valid_restricted_pods_wired_as_its_commands_say(
        tmp_path: Path) -> None:
    from k8s import container, mounts, objects, pod_spec, render, validate, workload
    from pss import restricted

    values, commands = _readme_k8s_quick_start()
    release = next(c for c in commands if c.startswith("helm install")).split()[2]
    objs = objects(render(values, name=release))
    assert validate(objs, [29, 37]) == []
    spec = pod_spec(objs)
    assert restricted(spec) == [], "the quick start must run in a namespace at the restricted level"
    name = workload(objs)["metadata"]["name"]
    for line in commands:  # every Pod and container the kubectl lines name exists in the rendered Pod
        if line.startswith("kubectl"):
            pod, cname = re.search(r"(\S+-\d+) -c (\S+)", line).groups()
            assert pod.rsplit("-", 1)[0] == name and container(spec, cname)
    maker, init = container(spec, "demo-model"), container(spec, "trtwarm-init")
    names = [c["name"] for c in spec["initContainers"]]
    assert names.index("demo-model") < names.index("trtwarm-init")
    assert mounts(maker)["trtwarm-model"] == mounts(init)["trtwarm-model"]
    assert values["engine"]["model"]["path"].startswith(mounts(init)["trtwarm-model"] + "/")
    assert "/models/cache" in mounts(container(spec, "inference")).values()  # "serving /models/cache/entries/..."
    assert "nvidia.com/gpu" not in str(init.get("resources")), "no GPU in the CPU quick start"
    # the model maker's own command, run here against a local directory: it writes the model init reads
    code = maker["command"][-1].replace(mounts(maker)["trtwarm-model"], str(tmp_path))
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(ROOT)}, timeout=120)
    assert (tmp_path / Path(values["engine"]["model"]["path"]).name).stat().st_size > 0
