"""Report paths (issue 41): a regular file is replaced atomically, anything else is written where it is or
refused with one sentence — never replaced — and an empty path is a usage error on both doors."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.report.json_report import atomic_write_text, write_report

TEXT = '{"report": "every byte of it"}\n'


def _through_fifo(tmp_path: Path, write_to: Path | None = None) -> tuple[Path, list[str]]:
    """A FIFO in ``tmp_path`` and what its reader got once the report was written to ``write_to`` (default:
    the FIFO itself)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []

    def read() -> None:
        with open(fifo, encoding="utf-8") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if write_to is not None:
        write_to.symlink_to(fifo)
    atomic_write_text(write_to or fifo, TEXT)
    reader.join(timeout=30)
    return fifo, got


def test_a_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old", encoding="utf-8")
    atomic_write_text(path, TEXT)
    assert path.read_text(encoding="utf-8") == TEXT
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left behind


def test_a_fifo_is_written_in_place_and_its_reader_gets_the_report(tmp_path: Path) -> None:
    fifo, got = _through_fifo(tmp_path)
    assert got == [TEXT] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_link_keeps_its_place_whatever_it_names(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write_text(link, TEXT)
    assert link.is_symlink() and real.read_text(encoding="utf-8") == TEXT
    to_fifo = tmp_path / "to-pipe"
    fifo, got = _through_fifo(tmp_path, to_fifo)
    assert got == [TEXT] and to_fifo.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "later.json")
    atomic_write_text(dangling, TEXT)
    assert dangling.is_symlink() and (tmp_path / "later.json").read_text(encoding="utf-8") == TEXT


def _device(tmp_path: Path, name: str, minor: int) -> Path:
    """A private node of the memory device ``minor`` (3: null, 7: full) in ``tmp_path``: never the system's
    own, so that a writer that replaces what it should not can only break this copy."""
    node = tmp_path / name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here ({exc})")
    return node


def test_a_character_device_is_written_not_replaced(tmp_path: Path) -> None:
    null = _device(tmp_path, "null", 3)
    assert write_report(lambda: atomic_write_text(null, TEXT), f"--robustexplain-json={null}") is None
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_full_device_is_one_sentence_and_stays_a_device(tmp_path: Path) -> None:
    """Run as root, the rename replaced the machine's /dev/full with a file."""
    full = _device(tmp_path, "full", 7)
    said = write_report(lambda: atomic_write_text(full, TEXT), f"--robustexplain-json={full}")
    assert said == f"--robustexplain-json={full}: cannot write the report: No space left on device"
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_a_directory_in_the_way_is_one_sentence(tmp_path: Path) -> None:
    said = write_report(lambda: atomic_write_text(tmp_path, TEXT), f"--robustexplain-json={tmp_path}")
    assert said == f"--robustexplain-json={tmp_path}: cannot write the report: a directory is in the way"


def test_an_empty_report_path_is_a_usage_error_on_both_doors(pytester: pytest.Pytester,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile('import pytest\n\n@pytest.mark.robustness\ndef test_gate(robustness):\n    pass\n')
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=")
    result.stderr.fnmatch_lines(["ERROR: robustexplain: --robustexplain-json: empty value; give one, or "
                                 "leave the option out for its default"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert cli.main(["run", "--backend", "template", "--users", "2", "--json", ""]) == 2
    assert "--json: empty value" in capsys.readouterr().err
