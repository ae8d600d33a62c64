"""Name the commits whose library sources a results file's ``code.rmsnorm_sha256`` digest belongs to.

    python tools/which_commit.py 3f1c…                      # a digest from a *_environment.json
    python tools/which_commit.py results/h200/layernorm_environment.json

A run records the digest of rmsnorm/'s sources (rmsnorm_lab.results.code_provenance), not a commit: the copy of
the checkout a GPU machine runs may carry no history or a stale one. This walks the commits that changed rmsnorm/
(newest first), computes each one's digest the same way from git's objects, and prints those that match: the run
measured that commit's library, as did every later commit up to the next one that changed rmsnorm/. Exit status 1
when none matches (the sources were not committed, or the history is elsewhere), 2 for an environment file that
records no digest or a machine without git.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmsnorm_lab.results import is_library_source, source_digest  # noqa: E402


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def commit_digests():
    """(commit, digest) for every commit that changed rmsnorm/, newest first: blobs read through one cat-file."""
    commits = _git("rev-list", "HEAD", "--", "rmsnorm").split()
    with subprocess.Popen(["git", "cat-file", "--batch"], cwd=ROOT, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as cat:
        for commit in commits:
            files = {}
            for line in _git("ls-tree", "-r", commit, "rmsnorm/").splitlines():
                meta, path = line.split("\t", 1)
                rel = path.removeprefix("rmsnorm/")
                if meta.split()[1] == "blob" and is_library_source(rel):
                    cat.stdin.write(meta.split()[2].encode() + b"\n")
                    cat.stdin.flush()
                    size = int(cat.stdout.readline().split()[2])
                    files[rel] = cat.stdout.read(size)
                    cat.stdout.read(1)  # the newline after the object
            yield commit, source_digest(files)
        cat.stdin.close()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.splitlines()[0], "\nusage: python tools/which_commit.py DIGEST|ENVIRONMENT.json", file=sys.stderr)
        return 2
    if shutil.which("git") is None:
        print("which_commit.py needs git on PATH: it reads the digests from the commits", file=sys.stderr)
        return 2
    wanted = argv[0]
    if wanted.endswith(".json"):
        code = json.loads(Path(wanted).read_text(encoding="utf-8")).get("code")
        if code is None:
            print(f"{wanted} records no code digest (a run from before the digest was recorded)", file=sys.stderr)
            return 2
        wanted = code["rmsnorm_sha256"]
    found = [commit for commit, digest in commit_digests() if digest == wanted]
    for commit in found:
        print(_git("log", "-1", "--format=%h %ad %s", "--date=short", commit).strip())
    if not found:
        print(f"no commit that changed rmsnorm/ has the sources of {wanted[:12]}…", file=sys.stderr)
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
