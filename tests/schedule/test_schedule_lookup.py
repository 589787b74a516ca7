"""find_schedule: user paths, then shipped files, down the arch fallback chain."""
import pytest

import plait.schedule.lookup as lookup
from plait.schedule import (ScheduleError, arch_chain, arch_of_capability, find_schedule,
                            load_schedule, shipped_folder)

ALGO = "probe"  # a name no shipped file uses


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """An empty stand-in for the shipped folder."""
    folder = tmp_path / "shipped"
    folder.mkdir()
    monkeypatch.setattr(lookup, "shipped_folder", lambda: folder)
    return folder


def put(folder, arch, algorithm=ALGO, tile=1, name=None, target=None):
    path = folder / arch / f"{name or algorithm}.yaml"  # arch '' for a flat folder
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = f"target: {target}\n" if target else ""
    path.write_text(f"algorithm: {algorithm}\n{extra}grid: {{M: {tile}}}\n")
    return path


def found(*args, **kw):
    s = find_schedule(*args, **kw)
    return None if s is None else s.source


@pytest.mark.parametrize("arch, chain", [
    ("sm_90a", ("sm_90a", "sm_90", "sm_89", "sm_86", "sm_80")),
    ("sm_90", ("sm_90", "sm_89", "sm_86", "sm_80")),
    ("sm_89", ("sm_89", "sm_86", "sm_80")),
    ("sm_86", ("sm_86", "sm_80")),
    ("sm_80", ("sm_80",)),
    ("sm_87", ("sm_87", "sm_86", "sm_80")),
    ("sm_75", ("sm_75",)),
    ("sm_100", ("sm_100", "sm_90", "sm_89", "sm_86", "sm_80")),  # sm_90a code is not portable
])
def test_arch_chain(arch, chain):
    assert arch_chain(arch) == chain


def test_arch_of_capability():
    assert arch_of_capability(9, 0) == "sm_90a"
    assert arch_of_capability(8, 0) == "sm_80"
    assert arch_of_capability(8, 6) == "sm_86"
    assert arch_of_capability(8, 9) == "sm_89"
    assert arch_of_capability(12, 0) == "sm_120"


def test_bad_arch_name():
    with pytest.raises(ScheduleError, match="'hopper' is not a GPU architecture"):
        find_schedule(ALGO, "hopper")


def test_fallback_walks_down_the_chain(shipped):
    p80 = put(shipped, "sm_80")
    p89 = put(shipped, "sm_89")
    p90a = put(shipped, "sm_90a")
    assert found(ALGO, "sm_90a") == str(p90a)
    assert found(ALGO, "sm_90") == str(p89)   # no sm_90 file: sm_89 is next
    assert found(ALGO, "sm_89") == str(p89)
    assert found(ALGO, "sm_86") == str(p80)
    assert found(ALGO, "sm_80") == str(p80)
    assert found(ALGO, "sm_75") is None       # below every file: the default heuristic
    assert found("other", "sm_90a") is None


def test_user_folder_before_shipped(shipped, tmp_path):
    put(shipped, "sm_90a")
    user = tmp_path / "mine"
    mine = put(user, "sm_80")
    assert found(ALGO, "sm_90a", search_paths=[user]) == str(mine)
    assert found(ALGO, "sm_75", search_paths=[user]) is None


def test_user_flat_folder_and_yml(shipped, tmp_path):
    flat = put(tmp_path / "flat", "")
    assert found(ALGO, "sm_86", search_paths=[tmp_path / "flat"]) == str(flat)
    yml = tmp_path / "yml" / "sm_86" / f"{ALGO}.yml"
    yml.parent.mkdir(parents=True)
    yml.write_text(f"algorithm: {ALGO}\n")
    assert found(ALGO, "sm_89", search_paths=[str(tmp_path / "yml")]) == str(yml)


def test_arch_folders_before_flat_files_in_one_place(shipped, tmp_path):
    put(tmp_path, "")
    nested = put(tmp_path, "sm_80")
    assert found(ALGO, "sm_90", search_paths=[tmp_path]) == str(nested)


def test_user_file_used_only_for_its_algorithm(shipped, tmp_path):
    other = put(tmp_path, "", algorithm="other", name="a")
    mine = put(tmp_path, "", name="b")
    assert found(ALGO, "sm_80", search_paths=[other, mine]) == str(mine)
    assert found(ALGO, "sm_80", search_paths=str(other)) is None


def test_missing_search_path_is_an_error(shipped, tmp_path):
    with pytest.raises(ScheduleError, match="nowhere: schedule search path does not exist"):
        find_schedule(ALGO, "sm_80", search_paths=[tmp_path / "nowhere"])


def test_target_limits_a_file_to_its_chain(shipped, tmp_path):
    hopper = put(tmp_path, "", name="h", target="sm_90a")
    assert found(ALGO, "sm_80", search_paths=[hopper]) is None
    assert found(ALGO, "sm_90a", search_paths=[hopper]) == str(hopper)


def test_gradient_names(shipped):
    path = put(shipped, "sm_90", algorithm="probe.bwd")
    assert found("probe.bwd", "sm_90a") == str(path)
    assert found(ALGO, "sm_90a") is None


def test_misnamed_file_is_an_error(shipped):
    path = put(shipped, "sm_80", algorithm="other", name=ALGO)
    with pytest.raises(ScheduleError) as info:
        find_schedule(ALGO, "sm_80")
    assert str(info.value) == (f"{path}:1: algorithm: the file is named for {ALGO!r} but "
                               "schedules 'other'")


def test_found_schedules_are_checked(shipped):
    path = shipped / "sm_80" / f"{ALGO}.yaml"
    path.parent.mkdir()
    path.write_text(f"algorithm: {ALGO}\nblock: {{N: {{threads: 100}}}}\n")
    with pytest.raises(ScheduleError, match=f"^{path}:2: block.N.threads: threads per axis"):
        find_schedule(ALGO, "sm_80")


def test_shipped_files_all_load():
    # Every schedule plait ships parses and passes the algorithm-free checks.
    for path in sorted(shipped_folder().glob("*/*.yaml")):
        schedule = load_schedule(path)
        assert find_schedule(schedule.algorithm, path.parent.name) == schedule


@pytest.mark.parametrize("name", ["../outside", "sub/probe", "..\\outside"])
def test_a_name_with_a_path_separator_names_no_file(name, tmp_path, shipped):
    """An algorithm named '../outside' must not read a file beside the schedule folders."""
    inside = tmp_path / "user"
    (inside / "sm_90").mkdir(parents=True)
    put(tmp_path, "", algorithm=name, name="outside")           # tmp_path/outside.yaml
    put(inside, "sm_90", algorithm=name, name="probe")          # user/sm_90/probe.yaml
    assert found(name, "sm_90", search_paths=[inside]) is None
