"""det/_context.py (with _collect.py and _archive.py): what a context ships, and the archive it is packed into."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
from pathlib import Path

import pytest
import zstandard

from det import _archive, _collect, _context
from det._context import MAX_CONTEXT_BYTES, ContextFile, collect, pack
from det.errors import ContextError
from stratus.contract.context_archive import ARCHIVE_MTIME
from stratus.harness._archive import extract


def names(root: Path, includes: tuple[Path, ...] = ()) -> list[str]:
    return [f.name for f in collect(root, includes)]


def tar_members(data: bytes) -> list[tarfile.TarInfo]:
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        return tar.getmembers()


# --------------------------------------------------------------------------------------------------
# ignore rules


# Each case: the files of a context folder (.detignore among them) and the names packed.
IGNORE_RULES = [
    pytest.param(
        {
            "model.py": "x",
            "model.pyc": "x",
            "model.pyo": "x",
            "__pycache__/model.cpython-311.pyc": "x",
            "pkg/__pycache__/notes.txt": "x",
            ".git/config": "x",
            "pkg/.git": "gitdir: ../.git/modules/pkg",
            "pkg/mod.py": "x",
            ".detignore": "!*.pyc\n!__pycache__/\n!.git/\n",
        },
        ["model.py", "pkg/mod.py"],
        id="always_ignored_names_are_never_shipped_even_when_negated",
    ),
    pytest.param(
        {"train.py": "x", ".detignore": "*.log\n"}, ["train.py"], id="detignore_itself_is_not_shipped"
    ),
    pytest.param(
        {
            "run.log": "",
            "keep.log": "",
            "sub/debug.log": "",
            "sub/keep.log": "",
            "a.py": "",
            ".detignore": "*.log\n!keep.log\n",
        },
        ["a.py", "keep.log", "sub/keep.log"],
        id="negation_reincludes_a_file",
    ),
    pytest.param({"keep.log": "", ".detignore": "!keep.log\n*.log\n"}, [], id="later_line_wins"),
    pytest.param(
        {
            "build/out.o": "",
            "src/build/gen.c": "",
            "src/main.c": "",
            "tools/build": "a file named build",
            ".detignore": "build/\n",
        },
        ["src/main.c", "tools/build"],
        id="dir_only_pattern_excludes_folders_but_not_files_of_that_name",
    ),
    pytest.param(
        {
            "top.txt": "",
            "sub/top.txt": "",
            "sub/x.txt": "",
            "a/sub/x.txt": "",
            ".detignore": "/top.txt\nsub/x.txt\n",
        },
        ["a/sub/x.txt", "sub/top.txt"],
        id="anchored_patterns_match_from_the_root_only",
    ),
    pytest.param(
        {
            "a/b": "",
            "a/x/b": "",
            "a/x/y/b": "",
            "b": "",
            "x/a/b": "",
            "logs/deep/er/f.txt": "",
            "deep/c.tmp": "",
            "c.tmp": "",
            ".detignore": "a/**/b\nlogs/**\n**/deep/*.tmp\n",
        },
        ["b", "c.tmp", "x/a/b"],
        id="double_star_patterns",
    ),
    pytest.param(
        {"data/x.bin": "", "data/sub/y.bin": "", "data/z.txt": "", ".detignore": "data/*.bin\n"},
        ["data/sub/y.bin", "data/z.txt"],
        id="wildcards_do_not_cross_folders",
    ),
    # git: "It is not possible to re-include a file if a parent directory of that file is excluded."
    pytest.param(
        {"data/keep.txt": "", "data/big.bin": "", "main.py": "", ".detignore": "data/\n!data/keep.txt\n"},
        ["main.py"],
        id="files_below_an_excluded_folder_cannot_be_reincluded",
    ),
    pytest.param(
        {"data/keep.txt": "", "data/big.bin": "", ".detignore": "data/*\n!data/keep.txt\n"},
        ["data/keep.txt"],
        id="contents_of_a_folder_can_be_excluded_and_one_file_kept",
    ),
    pytest.param(
        {
            "#notes": "",
            "!important": "",
            "plain.txt": "",
            "spaced.txt": "",
            ".detignore": "# a comment\n\n\\#notes\n\\!important\nspaced.txt   \n",
        },
        ["plain.txt"],
        id="comments_blank_lines_escapes_and_trailing_spaces",
    ),
]


@pytest.mark.parametrize(("files", "packed"), IGNORE_RULES)
def test_ignore_rules(tmp_path: Path, make_tree, files: dict[str, str], packed: list[str]) -> None:
    assert names(make_tree(tmp_path / "ctx", files)) == packed


def test_excluded_folders_are_not_walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_tree) -> None:
    root = make_tree(
        tmp_path / "ctx",
        {"data/a/b/c.bin": "", "data/d.bin": "", "src/m.py": "", ".detignore": "data/\n"},
    )
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    scanned: list[str] = []
    real_scandir = os.scandir

    def spy(path: str) -> object:
        scanned.append(os.path.relpath(path, os.path.realpath(root)))
        return real_scandir(path)

    monkeypatch.setattr(_collect.os, "scandir", spy)
    assert names(root) == ["src/m.py"]
    assert sorted(scanned) == [".", "src"]


def test_special_files_and_dangling_links_are_skipped(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"a.py": ""})
    os.mkfifo(root / "pipe")
    (root / ".#a.py").symlink_to("user@host.1234:1700000000")  # an editor lock file: dangling
    assert names(root) == ["a.py"]


# --------------------------------------------------------------------------------------------------
# includes


def test_includes_keep_their_top_level_name(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"train.py": ""})
    make_tree(tmp_path / "data", {"x.csv": "1", "sub/y.csv": "2"})
    make_tree(tmp_path / "other", {"config.yaml": "a: 1"})
    got = names(root, (root / ".." / "data", tmp_path / "other" / "config.yaml"))
    assert got == ["config.yaml", "data/sub/y.csv", "data/x.csv", "train.py"]


def test_detignore_applies_below_an_include_but_not_to_its_name(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"train.py": "", ".detignore": "data/\n*.bin\n"})
    make_tree(tmp_path / "data", {"x.csv": "", "w.bin": "", "__pycache__/c.pyc": ""})
    assert names(root, (tmp_path / "data",)) == ["data/x.csv", "train.py"]


def test_include_clashing_with_a_context_entry_names_both(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"data/local.csv": ""})
    make_tree(tmp_path / "elsewhere" / "data", {"x.csv": ""})
    with pytest.raises(ContextError) as err:
        collect(root, (tmp_path / "elsewhere" / "data",))
    message = str(err.value)
    assert str(root / "data") in message
    assert str(tmp_path / "elsewhere" / "data") in message


def test_two_includes_with_the_same_name_clash(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"a.py": ""})
    make_tree(tmp_path / "one" / "data", {"x": ""})
    make_tree(tmp_path / "two" / "data", {"y": ""})
    with pytest.raises(ContextError, match="data"):
        collect(root, (tmp_path / "one" / "data", tmp_path / "two" / "data"))


def test_missing_include_is_an_error(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"a.py": ""})
    with pytest.raises(ContextError, match="nope"):
        collect(root, (tmp_path / "nope",))


# --------------------------------------------------------------------------------------------------
# symbolic links


def test_link_inside_the_tree_is_stored_as_a_relative_link(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"src/real.py": "x", "cfg/a.yaml": "a"})
    (root / "alias.py").symlink_to("src/real.py")
    (root / "src" / "abs.yaml").symlink_to(root / "cfg" / "a.yaml")  # absolute, but inside
    (root / "cfgdir").symlink_to("cfg")  # a folder: not walked
    files = {f.name: f for f in collect(root)}
    assert files["alias.py"].link_target == "src/real.py"
    assert files["src/abs.yaml"].link_target == "../cfg/a.yaml"
    assert files["cfgdir"].link_target == "cfg"
    assert "cfgdir/a.yaml" not in files
    assert files["alias.py"].size == 0


def test_link_leaving_the_tree_is_followed(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"a.py": ""})
    make_tree(tmp_path / "shared", {"common.yaml": "k: v", "lib/util.py": "u"})
    (root / "common.yaml").symlink_to(tmp_path / "shared" / "common.yaml")
    (root / "lib").symlink_to("../shared/lib")
    files = {f.name: f for f in collect(root)}
    assert sorted(files) == ["a.py", "common.yaml", "lib/util.py"]
    assert files["common.yaml"].link_target is None
    assert files["common.yaml"].size == 4


def test_a_folder_pattern_drops_a_link_to_a_folder(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"train.py": "", ".detignore": "data/\ncache/\n"})
    make_tree(tmp_path / "datasets" / "mnist", {"train.idx": "0" * 1000})
    make_tree(root / "local", {"x": ""})
    (root / "data").symlink_to(tmp_path / "datasets" / "mnist")  # outside: would be followed
    (root / "cache").symlink_to("local")  # inside: would be stored as a link
    assert names(root) == ["local/x", "train.py"]


def test_link_back_into_the_tree_being_walked_is_an_error(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"a.py": ""})
    (root / "up").symlink_to("..")
    with pytest.raises(ContextError, match="up"):
        collect(root)


# --------------------------------------------------------------------------------------------------
# the archive


def test_pack_reports_what_it_packed(tmp_path: Path, context_tree) -> None:
    packed = pack(context_tree.build(tmp_path / "ctx"))
    assert packed.sha256 == hashlib.sha256(packed.data).hexdigest()
    assert packed.files == sorted([*context_tree.files, "link.py"])
    assert packed.num_files == len(context_tree.files) + 1
    assert packed.file_bytes == sum(
        len(v.encode() if isinstance(v, str) else v) for v in context_tree.files.values()
    )


def test_archive_entries_are_normalised(tmp_path: Path, context_tree) -> None:
    root = context_tree.build(tmp_path / "ctx")
    (root / "train.py").chmod(0o600)
    (root / "README.md").chmod(0o664)
    members = tar_members(pack(root).data)
    assert [m.name for m in members] == sorted([*context_tree.files, "link.py"])
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", ARCHIVE_MTIME)
        assert m.mtime == 1_577_836_800  # fixed, and after 1980 (zip refuses older times)
        if m.issym():
            assert m.linkname == "model/net.py"
        else:
            assert m.isreg()
            assert m.mode == (0o755 if m.name == "scripts/run.sh" else 0o644), m.name


def test_packing_twice_gives_the_same_bytes(tmp_path: Path, context_tree) -> None:
    root = context_tree.build(tmp_path / "ctx")
    assert pack(root).data == pack(root).data


def test_a_copy_with_other_mtimes_and_modes_gives_the_same_bytes(tmp_path: Path, context_tree) -> None:
    first = context_tree.build(tmp_path / "one")
    second = tmp_path / "elsewhere" / "two"
    shutil.copytree(first, second, symlinks=True)
    for i, path in enumerate(sorted(p for p in second.rglob("*") if not p.is_symlink())):
        os.utime(path, (1_000_000 + i * 7919, 2_000_000_000 - i * 104729))
        if path.is_file() and not os.access(path, os.X_OK):
            path.chmod(0o600)
    a, b = pack(first), pack(second)
    assert a.sha256 == b.sha256
    assert a.data == b.data


def test_bytes_do_not_depend_on_the_number_of_zstd_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context_tree
) -> None:
    root = context_tree.build(tmp_path / "ctx")
    (root / "big.bin").write_bytes(os.urandom(1 << 20) * 3)  # several zstd jobs
    monkeypatch.setattr(_archive.os, "cpu_count", lambda: 1)
    one = pack(root).data
    monkeypatch.setattr(_archive.os, "cpu_count", lambda: 8)
    assert pack(root).data == one
    monkeypatch.setattr(_archive.os, "cpu_count", lambda: None)
    assert pack(root).data == one


def test_a_changed_tree_changes_the_hash(tmp_path: Path, context_tree) -> None:
    root = context_tree.build(tmp_path / "ctx")
    before = pack(root).sha256
    (root / "train.py").write_text("print('bye')\n")
    assert pack(root).sha256 != before


def test_round_trip_keeps_contents_exec_bits_and_links(tmp_path: Path, context_tree) -> None:
    root = context_tree.build(tmp_path / "ctx")
    packed = pack(root)
    out = tmp_path / "out"
    assert sorted(extract(packed.data, out)) == packed.files
    for name in context_tree.files:
        assert (out / name).read_bytes() == (root / name).read_bytes(), name
        assert bool((out / name).stat().st_mode & stat.S_IXUSR) == (name == "scripts/run.sh"), name
    assert os.readlink(out / "link.py") == "model/net.py"
    assert (out / "link.py").read_text() == context_tree.files["model/net.py"]


# --------------------------------------------------------------------------------------------------
# limits and errors


def test_too_large_names_total_limit_and_five_largest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_tree
) -> None:
    sizes = {"a.bin": 900, "b.bin": 800, "c.bin": 700, "d.bin": 600, "e.bin": 500, "small.txt": 10}
    root = make_tree(tmp_path / "ctx", {name: b"x" * size for name, size in sizes.items()})
    monkeypatch.setattr(_context, "MAX_CONTEXT_BYTES", 2000)
    read: list[ContextFile] = []
    monkeypatch.setattr(_archive, "_file_pieces", lambda f: read.append(f) or iter([b""]))
    with pytest.raises(ContextError) as err:
        pack(root)
    message = str(err.value)
    assert "3,510 bytes" in message
    assert "2,000 bytes" in message
    for name, size in list(sizes.items())[:5]:
        assert f"{name} ({size} B)" in message
    assert "small.txt" not in message
    assert ".detignore" in message
    assert read == []  # the size is checked before any file is read


def test_limit_is_95_mib_of_file_bytes(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"ok.py": "x"})
    with open(root / "huge.bin", "wb") as f:  # sparse: costs no disk and no time
        f.truncate(MAX_CONTEXT_BYTES)
    with pytest.raises(ContextError, match=r"huge\.bin \(95\.0 MiB\)"):
        pack(root)
    assert MAX_CONTEXT_BYTES == 95 * 1024 * 1024


def test_exactly_at_the_limit_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"a.bin": b"x" * 600, "b.bin": b"y" * 400})
    monkeypatch.setattr(_context, "MAX_CONTEXT_BYTES", 1000)
    assert pack(root).file_bytes == 1000


def test_missing_context_folder_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ctx"
    with pytest.raises(ContextError, match="no-such-ctx.*does not exist"):
        pack(missing)


def test_context_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    file = tmp_path / "train.py"
    file.write_text("")
    with pytest.raises(ContextError, match="not a folder"):
        collect(file)


def test_file_changing_while_packing_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_tree
) -> None:
    root = make_tree(tmp_path / "ctx", {"log.txt": "1234"})
    real_collect = _context.collect

    def collect_then_append(root: Path, includes: tuple[Path, ...] = ()) -> list[ContextFile]:
        files = real_collect(root, includes)
        with open(root / "log.txt", "a") as f:
            f.write("more")
        return files

    monkeypatch.setattr(_context, "collect", collect_then_append)
    with pytest.raises(ContextError, match="changed while"):
        pack(root)
