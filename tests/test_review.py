"""Wire-format helpers: warnings stay within what the API server keeps."""

from webhook.admission.review import WARNINGS_BUDGET, cap_warnings


def test_few_warnings_pass_unchanged() -> None:
    assert cap_warnings(["a", "b"]) == ["a", "b"]


def test_many_warnings_are_cut_whole_with_a_count() -> None:
    warnings = [f"w{i} " + "x" * 200 for i in range(40)]
    kept = cap_warnings(warnings)
    assert sum(len(w) for w in kept) <= WARNINGS_BUDGET + 100
    assert kept[:-1] == warnings[: len(kept) - 1]
    assert (
        kept[-1]
        == f"gpu-policy: {40 - len(kept) + 1} more warning(s) not shown; run `gpu-policy check` on the manifest"
    )
