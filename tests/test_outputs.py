"""linformer_hf.outputs: an overwrite replaces only a folder of the command's own kind."""

import os

import pytest


def test_replace_folder_replaces_only_its_own_kind_and_restores_the_earlier_on_failure(tmp_path):
    """replace_folder deleted whatever the output folder held; and a new folder that could not be moved in left the
    earlier one moved aside, the output gone."""
    from linformer_hf.outputs import FolderKind, check_replaceable, replace_folder

    model = FolderKind(
        what="a model folder",
        required=("config.json",),
        holds=lambda folder, name: name in ("config.json", "model.safetensors"),
    )
    earlier, staging = tmp_path / "out", tmp_path / "new"
    earlier.mkdir()
    (earlier / "config.json").write_text("earlier")
    (earlier / "checkpoint-10").mkdir()
    staging.mkdir()
    (staging / "config.json").write_text("new")
    with pytest.raises(FileExistsError, match=r"out is not a model folder \(it holds checkpoint-10, which such"):
        replace_folder(str(staging), str(earlier), model)
    assert (earlier / "checkpoint-10").is_dir()
    os.rmdir(earlier / "checkpoint-10")
    with pytest.raises(FileNotFoundError):  # the new folder cannot be moved in: the earlier one is put back
        replace_folder(str(tmp_path / "missing"), str(earlier), model)
    assert (earlier / "config.json").read_text() == "earlier"
    replace_folder(str(staging), str(earlier), model)
    assert (earlier / "config.json").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["out"]
    os.remove(earlier / "config.json")
    (earlier / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="it holds notes.txt.*delete .* yourself"):
        check_replaceable(str(earlier), model)
    os.remove(earlier / "notes.txt")
    (earlier / "model.safetensors").write_text("")
    with pytest.raises(FileExistsError, match="it has no config.json, which every such folder holds"):
        check_replaceable(str(earlier), model)
