"""stale_resumes: a restart resumes from the newest checkpoint retention keeps, less those a fault destroyed."""

from __future__ import annotations

from chaos.judge.retention import kept, stale_resumes


def ev(event: str, attempt: int = 0, rank: int = 0, **fields) -> dict:
    return {"event": event, "attempt": attempt, "rank": rank, **fields}


def saved(*iterations: int, attempt: int = 0) -> list[dict]:
    return [ev("checkpoint_save_end", attempt, iteration=i) for i in iterations]


def resume(iteration: int, attempt: int, **fields) -> dict:
    return ev("resume", attempt, iteration=iteration, path=f"ckpt/iter_{iteration:07d}", **fields)


def test_kept_is_the_last_k_sealed_and_a_seal_again_is_the_newest():
    assert kept([3, 6, 9], 1) == [9]
    assert kept([3, 6, 9], 2) == [6, 9]
    assert kept([3, 6, 9], -1) == [3, 6, 9]
    assert kept([3, 6, 9, 3], 1) == [3]
    assert kept([3, 6, 9, 6], 2) == [9, 6]


def test_a_resume_from_the_newest_kept_is_not_stale():
    events = [*saved(3, 6, 9), resume(9, 1), ev("step", 1, iteration=10)]
    assert stale_resumes(events, 1) == 0
    assert stale_resumes(saved(3), 1) is None  # no restart


def test_a_resume_older_than_the_newest_kept_is_stale():
    assert stale_resumes([*saved(3, 6, 9), resume(6, 1)], 2) == 1
    assert stale_resumes([*saved(3, 6), ev("step", 1, iteration=1)], 1) == 1  # from scratch, 6 kept


def test_losing_all_k_is_no_failure_when_a_fault_destroyed_them():
    corrupt = ev("checkpoint_corrupt", 1, path="ckpt/iter_0000009", reason="truncated")
    assert stale_resumes([*saved(3, 6, 9), corrupt, ev("step", 1, iteration=1)], 1) == 0
    assert stale_resumes([*saved(3, 6, 9), corrupt, resume(6, 1)], 2) == 0
    # The rejected 9 stays on disk; the 3 sealed after it is what retention keeps, and what the next restart wants.
    again = ev("checkpoint_corrupt", 2, path="ckpt/iter_0000009", reason="truncated")
    first = [*saved(3, 6, 9), corrupt, ev("step", 1, iteration=1), *saved(3, attempt=1)]
    assert stale_resumes([*first, again, resume(3, 2)], 1) == 0
    assert stale_resumes([*first, again, ev("step", 2, iteration=1)], 1) == 1


def test_a_seal_without_its_event_and_a_local_resume_are_not_retentions():
    assert stale_resumes([*saved(3, 6), resume(9, 1)], 1) == 0  # sealed as the kill struck, before save_end
    assert stale_resumes([*saved(3, 6), resume(4, 1, local=True)], 1) == 0
    assert stale_resumes([*saved(3, 6), resume(6, 1, rank=1), ev("step", 1, iteration=1)], 1) == 1  # rank 0's decides
