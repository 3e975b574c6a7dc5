"""pytest's tmp_path under `cleanroom run -- pytest`: pytest-of-<user> lands in the run's root."""

import getpass
import os
import tempfile


def test_tmp_path_is_inside_the_run(tmp_path):
    root = os.environ["CLEANROOM_ROOT"]
    assert tempfile.gettempdir().startswith(root)
    assert str(tmp_path).startswith(root)
    assert f"pytest-of-{getpass.getuser()}" in str(tmp_path)
    (tmp_path / "data.txt").write_text("made by the test\n")
    print(f"tmp_path={tmp_path}")


def test_each_test_gets_its_own_tmp_path(tmp_path):
    assert not (tmp_path / "data.txt").exists()
