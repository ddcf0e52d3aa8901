"""The command line itself (issue 16): ``--help`` with variables and exit codes, the README in step with it, shell
completion, a mistyped command, and the answers to wrong shapes, variables and addresses."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, cmd_init_args, entries, env_for, run_trtwarm, trtwarm_argv

from trtwarm.cli.main import COMMANDS, _parser
from trtwarm.config import env_name
from trtwarm.errors import EXIT_MEANINGS
from trtwarm.cli.helptext import long_options, subcommands

README = (ROOT / "docs" / "cli.md").read_text()  # the CLI reference


def _section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n#", start + len(title))
    return README[start:end if end > 0 else None]


def _every_command(parser, words=()):  # noqa: ANN001, ANN202
    """``(words, parser)`` of every subcommand, nested ones (``remote ls``) included."""
    for name, sub in subcommands(parser).items():
        yield (*words, name), sub
        yield from _every_command(sub, (*words, name))


def test_help_names_every_flags_variable_and_what_each_exit_code_means() -> None:
    for words, sub in _every_command(_parser()):
        command = " ".join(words)
        run = run_trtwarm(*words, "--help")
        assert run.returncode == 0, command
        text = " ".join(run.stdout.split())  # argparse wraps lines anywhere
        for flag, _action in long_options(sub):
            assert f"[env {env_name(flag)}]" in text, (command, flag)
        assert "exit codes:" in run.stdout
        for code, meaning in EXIT_MEANINGS.items():
            assert f"{code} {' '.join(meaning.split())}" in text, (command, code)
    init = " ".join(run_trtwarm("init", "--help").stdout.split())
    for flag in ("--hardware-compat", "--lock-mode", "--log-format"):  # these had no help text
        assert re.search(re.escape(flag) + r" \{[^}]*\} [A-Za-z]", init), flag


def test_readme_command_reference_matches_help() -> None:
    reference = _section("### Command reference")
    parsers = subcommands(_parser())
    init_flags = {flag for flag, _ in long_options(parsers["init"])}
    documented = {}
    for item in re.split(r"\n\* ", reference)[1:]:
        command = re.match(r"`trtwarm ([^`\s]+)", item)[1]
        flags = set(re.findall(r"`(--[a-z0-9-]+)`", item))
        documented[command] = flags | (init_flags if "the init flags" in item else set())
    assert set(documented) == set(parsers) == set(COMMANDS)
    for command, sub in parsers.items():
        assert documented[command] == {flag for flag, _ in long_options(sub)}, command
    table = "\n".join(line for line in _section("### Flags").splitlines() if line.startswith("| `"))
    assert {f for f in init_flags if f"`{f}" not in table} == set(), "init flags missing from the README's table"
    assert set(re.findall(r"`(--[a-z0-9-]+)", table)) <= init_flags


def test_readme_exit_code_table_is_the_one_in_help() -> None:
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", _section("### Exit codes"), re.M))
    assert {int(c): m.replace("`", "") for c, m in rows.items()} == {c: m.replace("`", "") for c, m in
                                                                     EXIT_MEANINGS.items()}


def test_an_unknown_flag_points_at_the_command_s_own_help(model: Path, tmp_path: Path) -> None:
    run = run_trtwarm("init", "--bogus", "--model", str(model), "--cache-dir", str(tmp_path / "c"))
    assert run.returncode == 2 and "trtwarm init: unrecognized arguments: --bogus" in run.stderr
    assert "hint: `trtwarm init --help` lists the flags" in run.stderr
    typo = run_trtwarm("init", "--builder", "command", "--builder-version", "1", "--build-command", "cp {model} "
                       "{outptu}", "--model", str(model), "--cache-dir", str(tmp_path / "c"))
    assert typo.returncode == 2 and "must write to {output} (it has {outptu})" in typo.stderr


def test_a_mistyped_command_suggests_the_right_one_among_all() -> None:
    run = run_trtwarm("list")
    assert run.returncode == 2 and "unknown command 'list'" in run.stderr
    assert "hint: did you mean `trtwarm ls`?" in run.stderr
    assert all(c in run.stderr for c in COMMANDS) and "Traceback" not in run.stderr


def _bash_complete(script: str, line: str) -> list[str]:
    words = line.split(" ")
    program = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
               "_trtwarm; printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    return [w for w in out.splitlines() if w]


def test_bash_completion_offers_commands_flags_and_choices() -> None:
    run = run_trtwarm("completion", "bash")
    assert run.returncode == 0
    assert sorted(_bash_complete(run.stdout, "trtwarm s")) == ["selftest", "show", "sidecar", "sign", "stats"]
    assert _bash_complete(run.stdout, "trtwarm init --builder-") == ["--builder-version"]
    assert _bash_complete(run.stdout, "trtwarm init --builder ") == ["tensorrt", "onnxruntime", "command"]
    assert _bash_complete(run.stdout, "trtwarm init --precision fp") == ["fp32", "fp16", "fp8"]
    assert _bash_complete(run.stdout, "trtwarm ls --status ") == ["ok", "damaged", "building", "quarantined", "in-use"]
    assert "--explain" in _bash_complete(run.stdout, "trtwarm key --")


def test_bash_completion_offers_the_entry_names_after_show_and_rm(model: Path, cache: Path, tmp_path: Path) -> None:
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"))
    script = run_trtwarm("completion", "bash").stdout
    assert _bash_complete(script, f"trtwarm show --cache-dir {cache} ml") == [built.summary["name"]]
    assert _bash_complete(script, f"trtwarm rm --cache-dir {cache} --yes x") == []


def test_zsh_completion_is_valid_zsh() -> None:
    run = run_trtwarm("completion", "zsh")
    assert run.returncode == 0 and run.stdout.startswith("#compdef trtwarm")
    assert "'--status[only entries with this status" in run.stdout and "(ok damaged building quarantined in-use)" \
        in run.stdout
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed here: the script's syntax is not checked by zsh itself")
    subprocess.run(["zsh", "-n", "-c", run.stdout], check=True)


def test_zsh_completion_offers_the_entry_names_after_show_and_rm(model: Path, cache: Path, tmp_path: Path) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed here")
    built = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"))
    script = run_trtwarm("completion", "zsh").stdout
    assert "'*:entry:_trtwarm_entries'" in script  # after show and rm, in place of file names
    program = (f"{script}\nwords=(trtwarm show --cache-dir {cache} ''); _trtwarm_entry_names; print -l $reply\n"
               f"words=(trtwarm rm --cache-dir {tmp_path / 'none'} ''); _trtwarm_entry_names; print -l -- - $reply")
    out = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert out == [built.summary["name"], "-"]  # a missing cache offers nothing, and says nothing


def test_a_bad_sidecar_variable_points_to_the_sidecar_help() -> None:
    run = run_trtwarm("sidecar", env={"TRTWARM_PORT": "ninety"})
    assert run.returncode == 2 and "TRTWARM_PORT='ninety' is not an integer" in run.stderr
    assert "`trtwarm sidecar --help`" in run.stderr and "trtwarm init --help" not in run.stderr


def test_a_bind_address_of_another_host_is_not_blamed_on_the_port(tmp_path: Path) -> None:
    run = run_trtwarm("sidecar", "--bind", "192.0.2.1", "--port", "0", "--cache-dir", str(tmp_path / "c"),
                      "--handoff-dir", str(tmp_path / "h"))
    assert run.returncode == 2 and "cannot listen on 192.0.2.1" in run.stderr
    assert "hint: --bind must be an address of this host" in run.stderr and "--port" not in run.stderr


@pytest.mark.parametrize(("shape", "says"), [
    ("input=0x16", "a dimension is 0"),
    ("input=1x16:8x16:99999999999x16", "dimension 99999999999 is larger than 2147483647"),
    ("input=4x16;input=8x16", "--shape takes one input"),
])
def test_shapes_no_engine_can_serve_are_usage_errors(model: Path, cache: Path, tmp_path: Path, shape: str,
                                                     says: str) -> None:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h", "--shape", shape))
    assert run.returncode == 2 and says in run.stderr and "hint:" in run.stderr
    assert entries(cache) == []


def test_a_dynamic_input_without_shape_warns_and_is_not_named_static(model: Path, cache: Path, tmp_path: Path) -> None:
    run = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h"))
    assert run.returncode == 0, run.stderr
    assert "dynamic input 'input' [?x16] has no --shape" in run.stderr and "hint" not in run.stderr
    assert "_unshaped--" in run.summary["name"] and "static" not in run.summary["name"]


def test_a_hit_under_another_name_reports_the_entry_on_disk(tmp_path: Path, cache: Path) -> None:
    from trtwarm.cli.demo import make_model

    model = make_model(tmp_path / "models" / "res-net-50.onnx")
    first = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h1"))
    again = run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h2", "--name", "other"))
    assert again.returncode == 0 and again.summary["result"] == "hit"
    on_disk = [p.name for p in entries(cache)]
    assert on_disk == [first.summary["name"]] == [again.summary["name"]]
    assert json.loads((tmp_path / "h2" / "engine.json").read_text())["name"] == on_disk[0]
    assert f"is on the volume as {on_disk[0]}" in again.stderr and f"hit {on_disk[0]} in " in again.stderr


def test_demo_removes_its_temporary_directory(tmp_path: Path) -> None:
    run = run_trtwarm("demo", env={"TMPDIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert "run 2: hit " in run.stdout and " ms  demo-mlp_" in run.stdout
    assert "(temporary, removed at the end)" in run.stdout
    assert list(tmp_path.glob("trtwarm-demo-*")) == []


def test_the_demo_run_again_in_its_workdir_reuses_what_it_built(tmp_path: Path) -> None:
    """The quick start's first line, typed a second time: the kept cache gives two hits, which is success."""
    first = run_trtwarm("demo", "--workdir", str(tmp_path / "demo"))
    assert first.returncode == 0 and "(temporary" not in first.stdout, first.stdout + first.stderr
    again = run_trtwarm("demo", "--workdir", str(tmp_path / "demo"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "run 1: hit " in again.stdout and "demo ok: both starts reused" in again.stdout


@pytest.mark.parametrize("command", ["remote ls", "init"])
def test_s3_without_the_s3_extra_is_a_configuration_error(model: Path, tmp_path: Path, command: str) -> None:
    """``pip install -e .`` leaves out obstore (the ``s3`` extra): ``--remote s3://`` says so, exit 2, not a bug's
    exit 1. The package is made unimportable by a module of its name first on the path."""
    hidden = tmp_path / "hidden" / "obstore"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('obstore is not installed in this test')\n")
    args = (["remote", "ls"] if command == "remote ls" else
            cmd_init_args(model, tmp_path / "cache", tmp_path / "h"))
    run = run_trtwarm(*args, "--remote", "s3://bucket/prefix",
                      env={"PYTHONPATH": f"{hidden.parent}{os.pathsep}{ROOT}"})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "needs the obstore package" in run.stderr and "pip install 'trtwarm[s3]'" in run.stderr


def _with_stdout(args: list[str], stdout: str) -> subprocess.CompletedProcess:
    """Run trtwarm with standard output closed (``closed``), on a full device (``full``), or into a pipe whose
    reader is already gone (``gone``)."""
    argv = trtwarm_argv(*args)
    if stdout == "gone":
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(None))
        proc.stdout.close()  # the reader leaves before the command writes anything
        return subprocess.CompletedProcess(argv, proc.wait(60), "", proc.stderr.read())
    redirect = ">&-" if stdout == "closed" else ">/dev/full"
    return subprocess.run(["sh", "-c", f'exec {redirect}; exec "$@"', "sh", *argv], capture_output=True, text=True,
                          env=env_for(None), timeout=60, check=False)


def test_standard_output_that_cannot_be_written_is_never_blamed_on_the_volume(model: Path, cache: Path,
                                                                              tmp_path: Path) -> None:
    assert run_trtwarm(*cmd_init_args(model, cache, tmp_path / "h")).returncode == 0
    for how in ("closed", "full"):  # a hit is a hit: the summary is also in engine.json
        run = _with_stdout(cmd_init_args(model, cache, tmp_path / how), how)
        assert run.returncode == 0 and "Traceback" not in run.stderr, (how, run.stderr)
        assert json.loads((tmp_path / how / "engine.json").read_text())["ready"] is True
    full = _with_stdout(["ls", "--cache-dir", str(cache)], "full")
    assert full.returncode == 14 and "cannot write the output: No space left" in full.stderr
    assert "hint:" in full.stderr and "volume" not in full.stderr and "Traceback" not in full.stderr
    assert _with_stdout(["ls", "--cache-dir", str(cache)], "gone").returncode == 0  # `ls | head`: fine
    cut = _with_stdout(["verify", "--cache-dir", str(cache)], "gone")  # `verify | head` must not read as "all ok"
    assert cut.returncode == 14 and "cut short" in cut.stderr and "hint:" in cut.stderr, cut.stderr
    assert _with_stdout(["ls", "--cache-dir", str(cache)], "closed").returncode == 0
