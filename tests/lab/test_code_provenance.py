"""Which code a run measured: the digest of rmsnorm/'s sources in every environment file, and back to commits.

rmsnorm_lab.results.code_provenance digests the library's modules and its C++; tools/which_commit.py computes the
same digest from git's objects for each commit that changed rmsnorm/ and names the ones that match. Checked here on
a throw-away repository of two commits, and on the environment files the scripts write.
"""

import json
import shutil
import subprocess

import pytest

import checkout_scripts
from rmsnorm_lab import results


def test_the_digest_covers_the_modules_and_the_cpp_and_changes_with_any_byte(tmp_path):
    files = results.library_files()
    assert {"__init__.py", "article/__init__.py", "csrc/triton_launch.cpp"} <= set(files)
    assert not any("__pycache__" in path for path in files)
    assert results.code_provenance() == {"rmsnorm_sha256": results.source_digest(files), "rmsnorm_files": len(files)}
    assert results.environment_info()["code"] == results.code_provenance()  # in every environment file built on it
    changed = {**files, "config.py": files["config.py"] + b"\n"}
    renamed = {("configs.py" if k == "config.py" else k): v for k, v in files.items()}
    digests = {results.source_digest(f) for f in (files, changed, renamed, dict(reversed(list(files.items()))))}
    assert len(digests) == 3  # a byte or a name changes it; the order files are read in does not


def _repo(tmp_path):
    """A repository whose rmsnorm/ changes in commits 1 and 3 (not in 2): returns their hashes."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "rmsnorm" / "csrc").mkdir(parents=True)
    hashes = []
    for i, (module, other) in enumerate([("one", "a"), ("one", "b"), ("two", "b")]):
        (tmp_path / "rmsnorm" / "__init__.py").write_text(module)
        (tmp_path / "rmsnorm" / "csrc" / "launch.cpp").write_text("int x;")
        (tmp_path / "README").write_text(other)
        git("add", "-A")
        git("commit", "-qm", f"commit {i}")
        hashes.append(git("rev-parse", "--short", "HEAD"))
    return hashes


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to read commits (the Docker image has none)")
def test_which_commit_names_the_commit_whose_library_a_digest_is(tmp_path, monkeypatch, capsys):
    first, _second, third = _repo(tmp_path)
    tool = checkout_scripts.load("tools/which_commit.py")
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    digest = results.source_digest(results.library_files(tmp_path / "rmsnorm"))
    assert tool.main([digest]) == 0 and capsys.readouterr().out.split()[0] == third
    (tmp_path / "env.json").write_text(json.dumps({"code": {"rmsnorm_sha256": results.source_digest(
        {"__init__.py": b"one", "csrc/launch.cpp": b"int x;"})}}))
    assert tool.main([str(tmp_path / "env.json")]) == 0
    assert capsys.readouterr().out.split()[0] == first  # commit 2 changed no library source: 1's digest is its own
    assert tool.main(["0" * 64]) == 1 and "no commit" in capsys.readouterr().err
    (tmp_path / "old.json").write_text(json.dumps({"torch": "2.11"}))
    assert tool.main([str(tmp_path / "old.json")]) == 2 and "no code digest" in capsys.readouterr().err


def test_which_commit_without_git_says_so(monkeypatch, capsys):
    tool = checkout_scripts.load("tools/which_commit.py")
    monkeypatch.setenv("PATH", "")
    assert tool.main(["0" * 64]) == 2 and "needs git" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["scripts/benchmark_fast.py", "scripts/benchmark_cliffs.py"])
def test_the_scripts_with_their_own_environment_record_the_code_too(script):
    text = (checkout_scripts.ROOT / script).read_text(encoding="utf-8")
    assert '"code": code_provenance()' in text
