"""The operator's allow-list patterns, matched against a node's interfaces: what the
driver warns about at start (a pattern that names nothing here)."""

from dradriver.kit.sysfs import matches, unmatched


def test_a_pattern_that_names_no_interface_is_reported():
    names = ["lo", "eth0", "ens1f0"]
    assert unmatched(["eth0", "eth9", "ens*", "ib*"], names) == ["eth9", "ib*"]
    assert unmatched([], names) == []
    assert unmatched(["eth0"], []) == ["eth0"]


def test_matching_is_the_same_glob_as_the_allow_lists():
    for pattern in ("eth[0-1]", "ens?f0", "*"):
        assert (pattern not in unmatched([pattern], ["eth0", "ens1f0"])) == any(
            matches(n, [pattern]) for n in ["eth0", "ens1f0"]
        )
    assert unmatched(["ETH0"], ["eth0"]) == ["ETH0"]  # case matters, as the kernel's names
