"""Hostile or broken YAML files give a ScheduleError naming FILE:LINE, never a traceback."""
import pytest

from plait.schedule import ScheduleError, load_schedule, parse_schedule


def problems(path) -> list[str]:
    with pytest.raises(ScheduleError) as info:
        load_schedule(path)
    return info.value.problems


def billion_laughs() -> str:
    """Nine levels of nine aliases each: 9**9 strings from a few hundred bytes."""
    text = "algorithm: f\na: &a [" + ", ".join(['"lol"'] * 9) + "]\n"
    for prev, name in zip("abcdefgh", "bcdefghi"):
        text += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    return text


def test_alias_bomb_is_refused_without_expanding(write):
    text = billion_laughs()
    assert len(text) < 1024
    [msg] = problems(write(text))
    assert "expands to more than" in msg and "aliases" in msg
    assert msg.startswith(str(write(text)) + ":")


@pytest.mark.parametrize("text, line", [
    ("algorithm: f\nsave: &a [*a]\n", 2),
    ("algorithm: f\nkernels:\n  k: &k {<<: *k}\n", 3),
])
def test_recursive_alias(write, text, line):
    path = write(text)
    [msg] = problems(path)
    assert msg.startswith(f"{path}:{line}: ") and "contains itself" in msg


def test_anchors_and_merges_still_work(write):
    s = load_schedule(write("algorithm: f\nkernels:\n  a: &k {warps: 8}\n  b: *k\n"
                            "  c: {<<: *k, grid: {M: 2}}\n"))
    assert s.for_kernel("b").warps == 8 and s.for_kernel("c").warps == 8


def test_an_anchored_merge_read_twice_is_not_a_duplicate(write):
    s = load_schedule(write("algorithm: f\nkernels:\n  a: &k {warps: 8}\n"
                            "  b: &m {<<: *k, warps: 4}\n  c: *m\n"))
    assert s.for_kernel("b").warps == 4 and s.for_kernel("c").warps == 4


@pytest.mark.parametrize("text, line, key", [
    ("algorithm: f\nwarps: !custom 8\n", 2, "warps"),
    ("algorithm: f\ngrid: !custom {M: 1}\n", 2, "grid"),
    ("algorithm: f\nsave: !!set {a}\n", 2, "save"),
    ("algorithm: f\n\nwarps: !!int eight\n", 3, "warps"),
    ("algorithm: f\n!custom grid: {M: 1}\n", 2, ""),
])
def test_tags_are_refused(write, text, line, key):
    path = write(text)
    [msg] = problems(path)
    assert msg.startswith(f"{path}:{line}: {key + ': ' if key else ''}")


def test_nul_byte(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"algorithm: f\ngrid: {M: 1}\nwarps: 8\x00\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:3: ") and "#x0000" in msg


def test_bad_utf8(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"algorithm: f\n# caf\xe9\ngrid: {M: 1}\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:2: not UTF-8") and "0xe9" in msg


def test_deep_nesting():
    with pytest.raises(ScheduleError, match=r"^s\.yaml:\d+: .*(nested|deep)"):
        parse_schedule("algorithm: f\nsave: " + "[" * 3000 + "]" * 3000 + "\n", "s.yaml")


def test_null_key_is_kept_for_the_schema(write):
    path = write("algorithm: f\n~: 1\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:2: None: unknown key")
