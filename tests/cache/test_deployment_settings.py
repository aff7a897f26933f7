"""Deployment-wide settings: every replica sharing a database agrees on one value, the first one claimed."""

import threading

from cache import deployment


def test_an_unclaimed_setting_is_none(cache):
    assert cache.deployment_setting("step_width") is None


def test_the_first_claim_wins(cache):
    assert cache.claim_deployment_setting("step_width", "4") == "4"
    assert cache.claim_deployment_setting("step_width", "8") == "4"
    assert cache.deployment_setting("step_width") == "4"
    assert cache.claim_deployment_setting("dtype", "bfloat16") == "bfloat16"  # names are independent


def test_another_replica_sees_the_claimed_value(open_cache, tmp_path):
    a = open_cache(tmp_path / "a")
    b = open_cache(tmp_path / "b", store=tmp_path / "a")
    assert a.claim_deployment_setting("step_width", "4") == "4"
    assert b.deployment_setting("step_width") == "4"
    assert b.claim_deployment_setting("step_width", "16") == "4"


def test_a_claim_that_loses_the_race_returns_the_winners_value(cache, monkeypatch):
    """The row appears between the claim's read and its insert: the insert fails and the winner's value is read."""
    cache.claim_deployment_setting("step_width", "4")
    reads = []
    real_read = deployment.read

    def read_missing_first(sessions, name):
        reads.append(name)
        return None if len(reads) == 1 else real_read(sessions, name)

    monkeypatch.setattr(deployment, "read", read_missing_first)
    assert cache.claim_deployment_setting("step_width", "8") == "4"
    assert len(reads) == 2  # the read before the insert, and the read back after it failed


def test_replicas_claiming_at_once_agree(open_cache, tmp_path):
    replicas = [open_cache(tmp_path / "r0")]
    replicas += [open_cache(tmp_path / f"r{n}", store=tmp_path / "r0") for n in range(1, 4)]
    start = threading.Barrier(len(replicas), timeout=60)
    results: dict[int, str] = {}

    def claim(number: int) -> None:
        start.wait()
        results[number] = replicas[number].claim_deployment_setting("step_width", str(number))

    threads = [threading.Thread(target=claim, args=(number,), daemon=True) for number in range(len(replicas))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "replicas still claiming after 60 s"
    assert len(set(results.values())) == 1 and len(results) == len(replicas)
    assert replicas[0].deployment_setting("step_width") == results[0]
