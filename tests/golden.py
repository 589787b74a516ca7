"""Golden-text comparison with an --update-golden switch."""
import os

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def check_golden(request, name: str, text: str) -> None:
    path = os.path.join(GOLDEN_DIR, name)
    if request.config.getoption("--update-golden") or not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        if not request.config.getoption("--update-golden"):
            raise AssertionError(f"golden file {name} was missing; written now, rerun")
        return
    with open(path) as f:
        expected = f.read()
    assert text == expected, f"{name} differs from its golden text (rerun with --update-golden)"
